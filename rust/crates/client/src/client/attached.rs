//! A client attached to a standalone driver through its directory (`shm/`): commands go on the
//! cnc's to-driver ring, responses come back on the broadcast buffer, publications append into
//! the mapped log with the lock-free term appender (no lock shared with the driver), and
//! subscriptions read mapped logs and publish their own position counters.
//!
//! A background thread sends keepalives every [`KEEPALIVE_INTERVAL`] and watches the driver's
//! heartbeat; once the driver has been silent for the driver timeout, every call returns
//! [`Error::Timeout`] (Python: `affinity.DriverTimeoutError`) instead of hanging.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::client::{MessageBatch, MessageHeader};
use crate::error::Error;
use crate::logbuffer::Offer;
use crate::protocol::OfferError;
use crate::shm::broadcast::{BroadcastReceiver, Received};
use crate::shm::cnc::{Cnc, CNC_FILE};
use crate::shm::command::{error_code, Command, Response};
use crate::shm::counters::{Counter, CountersReader};
use crate::shm::directory::{self, epoch_ms, DirectoryState};
use crate::shm::log_buffer::{ExclusiveAppender, LogBuffer, LogIdentity, Unsent};
use crate::shm::ring_buffer::{ManyToOneRingBuffer, Write};
use crate::shm::status::{DriverEventInfo, PublicationInfo, SystemCounter};
use crate::shm::wake::{DataWake, ParkWake};
use crate::sync::lock;
use crate::wire::flags;

/// [`AttachedClient::threading`] of a client attached to a driver in another process.
pub const STANDALONE_THREADING: &str = "standalone";

/// Driver events a client keeps until [`AttachedClient::drain_events`] takes them; later ones
/// are dropped and counted.
pub const MAX_EVENTS: usize = 4096;

/// How often the client tells the driver it is alive.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_millis(100);
/// How long a command waits for its response (the contract's one default).
pub use crate::shm::directory::COMMAND_TIMEOUT;
/// Most messages `offer_batch` appends with one claim on the log's tail.
pub const BATCH_CLAIM_MESSAGES: usize = 1024;
/// Term-end rotations `offer_batch` retries at once before it reports an admin action.
const ADMIN_RETRIES: u32 = 2;
/// Invoker threading: offers between two driver duty cycles run by the publisher (a refused
/// offer runs one at once).
const INVOKE_EVERY_OFFERS: u64 = 16;

/// One duty cycle of a driver running in this process with invoker threading: the work done
/// (0 = idle, or another thread is running a cycle). Handed to the client by whoever composed
/// the driver and the client (`crate::embedded`); the client never sees the driver itself.
pub type DutyCycle = Arc<dyn Fn() -> Result<usize> + Send + Sync>;

/// Stops a driver in this process: drains for at most the given time (`None`: the driver's own
/// bound) and returns what was left unsent.
pub type OnClose = Box<dyn FnOnce(Option<Duration>) -> Unsent + Send>;

/// What a client of a driver in this process is given besides the directory.
pub struct InProcessDriver {
    /// The threading mode's name, as [`AttachedClient::threading`] reports it.
    pub threading: &'static str,
    /// With invoker threading: runs one driver duty cycle. The client runs it while it waits
    /// for an answer and from [`AttachedClient::do_work`].
    pub duty_cycle: Option<DutyCycle>,
    /// Stops the driver after the client closed (drains publications for at most the given
    /// time, the driver's own bound when `None`; end of stream to subscribers; files and
    /// directory removed) and says what the drain left unsent.
    pub on_close: OnClose,
    /// How long a command waits for the driver's answer.
    pub command_timeout: Duration,
    /// Threaded modes: an empty poll or a refused offer yields the CPU once, so that a busy
    /// application loop does not starve the driver's threads on a small machine.
    pub yields_when_idle: bool,
    /// Threaded modes: written after each offer, so the driver's sending thread does not
    /// sleep out its idle park before it sends (`MediaDriver::wake`).
    pub wake: Option<Arc<ParkWake>>,
    /// Threaded modes: woken by the driver's receiver after it received data, what
    /// [`AttachedClient::wait_for_data`] parks on (`MediaDriver::data_wake`).
    pub data_wake: Option<Arc<DataWake>>,
}

type Result<T> = std::result::Result<T, Error>;

fn shm(error: crate::shm::ShmError) -> Error {
    Error::from(error)
}

struct NewImage {
    correlation_id: i64,
    session_id: i32,
    log_file: String,
    position_counter_id: i32,
}

#[derive(Default)]
struct Inbox {
    responses: HashMap<i64, Response>,
    pending: HashSet<i64>,
    images: HashMap<i64, Vec<NewImage>>,
    gone: HashSet<i64>,
    /// Registration ids of this client's publications (their driver events are kept).
    publications: HashMap<i64, u32>,
    /// Driver events of this client's publications, oldest first (at most [`MAX_EVENTS`]).
    events: std::collections::VecDeque<DriverEventInfo>,
    /// Events dropped because [`Self::events`] was full.
    dropped_events: u64,
    /// Commands whose caller gave up (timeout, interrupt): a resource they still create is
    /// removed at once, so a failed command leaves nothing behind.
    abandoned: HashSet<i64>,
}

struct Shared {
    dir: PathBuf,
    cnc: Cnc,
    ring: ManyToOneRingBuffer,
    counters: CountersReader,
    client_id: i64,
    /// Random, carried by this client's keepalives and close: the driver ignores a close (or
    /// keepalive) of this client id with another token (`docs/driver-protocol.md`).
    close_token: i64,
    driver_pid: i64,
    driver_timeout_ms: i64,
    driver_dead: AtomicBool,
    closed: AtomicBool,
    generation: AtomicU64,
    receiver: Mutex<(BroadcastReceiver, Vec<u8>)>,
    inbox: Mutex<Inbox>,
    /// Invoker threading: the in-process driver's duty cycle.
    duty_cycle: Option<DutyCycle>,
    /// The driver runs in this process: its liveness is not watched (it ends with us).
    in_process: bool,
    /// How long a command waits for its answer.
    command_timeout: Duration,
    /// See [`InProcessDriver::yields_when_idle`].
    yields_when_idle: AtomicBool,
    /// See [`InProcessDriver::wake`].
    wake: OnceLock<Arc<ParkWake>>,
    /// See [`InProcessDriver::data_wake`].
    data_wake: OnceLock<Arc<DataWake>>,
}

/// One publication handle of `registration_id` is gone: its driver events stop being kept once
/// no handle is left.
fn forget_publication_handle(inbox: &mut Inbox, registration_id: i64) {
    if let Some(count) = inbox.publications.get_mut(&registration_id) {
        *count = count.saturating_sub(1);
        if *count == 0 {
            inbox.publications.remove(&registration_id);
        }
    }
}

/// What one broadcast message did to the [`Inbox`].
#[derive(Debug, PartialEq)]
enum Applied {
    /// Nothing this client waits for, or only kept for a later call.
    Nothing,
    /// A subscription of this client gained or lost an image.
    ImagesChanged,
    /// The driver timed this client out.
    ClientTimedOut,
    /// The answer to a command whose caller gave up: what it created must be undone.
    Abandoned(Response),
}

impl Inbox {
    /// Takes one message from the driver's broadcast, in broadcast order.
    fn apply(&mut self, response: Response, client_id: i64) -> Applied {
        match response {
            Response::AvailableImage {
                correlation_id,
                subscription_registration_id,
                log_file,
                subscriber_position_counter_id,
                session_id,
                ..
            } => match self.images.get_mut(&subscription_registration_id) {
                Some(images) => {
                    images.push(NewImage {
                        correlation_id,
                        session_id,
                        log_file,
                        position_counter_id: subscriber_position_counter_id,
                    });
                    Applied::ImagesChanged
                }
                None => Applied::Nothing,
            },
            Response::UnavailableImage { correlation_id, subscription_registration_id, .. } => {
                if self.images.contains_key(&subscription_registration_id) {
                    self.gone.insert(correlation_id);
                    Applied::ImagesChanged
                } else {
                    Applied::Nothing
                }
            }
            Response::ClientTimeout { client_id: timed_out } if timed_out == client_id => Applied::ClientTimedOut,
            Response::Error { correlation_id, .. }
            | Response::PublicationReady { correlation_id, .. }
            | Response::SubscriptionReady { correlation_id }
            | Response::OperationSuccess { correlation_id }
            | Response::PublicationStatus { correlation_id, .. }
            | Response::SubscriptionStatus { correlation_id, .. } => {
                if self.pending.remove(&correlation_id) {
                    // Count the handle now, not when the caller takes the answer: a driver event
                    // for the publication may follow in this very batch.
                    if let Response::PublicationReady { registration_id, .. } = response {
                        *self.publications.entry(registration_id).or_insert(0) += 1;
                    }
                    self.responses.insert(correlation_id, response);
                    Applied::Nothing
                } else if self.abandoned.remove(&correlation_id) {
                    Applied::Abandoned(response)
                } else {
                    Applied::Nothing
                }
            }
            Response::DriverEvent { publication_registration_id, json } => {
                if self.publications.contains_key(&publication_registration_id) {
                    match serde_json::from_str::<DriverEventInfo>(&json) {
                        Ok(_) if self.events.len() >= MAX_EVENTS => self.dropped_events += 1,
                        Ok(event) => self.events.push_back(event),
                        Err(_) => self.dropped_events += 1,
                    }
                }
                Applied::Nothing
            }
            Response::ClientTimeout { .. } => Applied::Nothing,
        }
    }
}

impl Shared {
    /// Whether the client is still usable: `Err` once it was closed or the driver was found
    /// dead. Inlined: every offer and poll runs it (two `Relaxed` loads).
    #[inline]
    fn check(&self) -> Result<()> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(Error::Closed("client"));
        }
        if self.driver_dead.load(Ordering::Relaxed) {
            return Err(self.driver_timeout());
        }
        Ok(())
    }

    fn driver_timeout(&self) -> Error {
        let age = self.cnc.driver_heartbeat_ms().map(|beat| epoch_ms().saturating_sub(beat)).unwrap_or(-1);
        Error::Timeout(format!(
            "the driver (pid {}) in {} has not beaten for {age} ms (driver timeout {} ms)",
            self.driver_pid,
            self.dir.display(),
            self.driver_timeout_ms
        ))
    }

    fn send(&self, command: &Command) -> Result<()> {
        let (msg_type_id, bytes) = command.encode();
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        loop {
            match self.ring.write(msg_type_id, &bytes).map_err(shm)? {
                Write::Written => return Ok(()),
                Write::Full if Instant::now() < deadline => std::thread::sleep(Duration::from_micros(100)),
                Write::Full => {
                    return Err(Error::Timeout(format!("the to-driver ring in {} stayed full", self.dir.display())))
                }
            }
        }
    }

    /// Threaded in-process driver: an offer appended, the sending thread is woken if parked.
    fn wake_driver(&self) {
        if let Some(wake) = self.wake.get() {
            wake.wake();
        }
    }

    /// Threaded in-process driver: the calling thread found nothing to do (an empty poll, a
    /// refused offer) and yields the CPU once if the client was asked to.
    fn idle(&self) {
        if self.duty_cycle.is_none() && self.yields_when_idle.load(Ordering::Relaxed) {
            std::thread::yield_now();
        }
    }

    /// Reads the broadcast buffer: keeps responses we wait for and images of our subscriptions.
    /// Invoker threading: one duty cycle of the in-process driver (unless another thread is
    /// running one), then the driver's answers read; the work done. Without a duty cycle, 0.
    fn invoke(&self) -> Result<usize> {
        match &self.duty_cycle {
            Some(cycle) => {
                let work = cycle()?;
                self.service()?;
                Ok(work)
            }
            None => Ok(0),
        }
    }

    fn service(&self) -> Result<()> {
        let mut guard = lock(&self.receiver);
        let (receiver, scratch) = &mut *guard;
        let mut inbox = lock(&self.inbox);
        let mut changed = false;
        for _ in 0..1024 {
            let msg_type_id = match receiver.receive(scratch).map_err(shm)? {
                Received::Message(id) => id,
                Received::Empty => break,
                // Responses may have been lost: waiting commands time out; images are re-sent
                // only on new publications, so a lapped client is as good as closed. The driver's
                // buffer (1 MiB) makes this very unlikely.
                Received::Lapped => continue,
            };
            let Ok(response) = Response::decode(msg_type_id, scratch) else { continue };
            match inbox.apply(response, self.client_id) {
                Applied::Nothing => {}
                Applied::ImagesChanged => changed = true,
                Applied::ClientTimedOut => self.closed.store(true, Ordering::Relaxed),
                Applied::Abandoned(response) => self.undo(&response, &mut inbox),
            }
        }
        if changed {
            self.generation.fetch_add(1, Ordering::Release);
        }
        Ok(())
    }

    /// Sends a query and waits for its answer (no interrupt: queries are answered in one cycle).
    fn query(&self, build: impl FnOnce(i64) -> Command) -> Result<Response> {
        uninterrupted(|interrupt| self.request_with(build, interrupt))
    }

    /// Removes what an abandoned command created after its caller gave up.
    fn undo(&self, response: &Response, inbox: &mut Inbox) {
        match *response {
            Response::PublicationReady { registration_id, .. } => self.remove_publication(registration_id),
            Response::SubscriptionReady { correlation_id: registration_id } => {
                inbox.images.remove(&registration_id);
                self.remove_subscription(registration_id);
            }
            _ => {}
        }
    }

    /// Tells the driver this client let go of one handle of publication `registration_id`.
    fn remove_publication(&self, registration_id: i64) {
        let Ok(correlation_id) = self.ring.next_correlation_id() else { return };
        let _ = self.send(&Command::RemovePublication { client_id: self.client_id, correlation_id, registration_id });
    }

    /// Tells the driver this client removed subscription `registration_id`.
    fn remove_subscription(&self, registration_id: i64) {
        let Ok(correlation_id) = self.ring.next_correlation_id() else { return };
        let _ = self.send(&Command::RemoveSubscription { client_id: self.client_id, correlation_id, registration_id });
    }

    /// Gives up waiting for `correlation_id`: what it still creates is removed on arrival.
    fn abandon(&self, correlation_id: i64) {
        let mut inbox = lock(&self.inbox);
        inbox.images.remove(&correlation_id);
        if inbox.pending.remove(&correlation_id) {
            inbox.abandoned.insert(correlation_id);
        }
        if let Some(response) = inbox.responses.remove(&correlation_id) {
            self.undo(&response, &mut inbox);
        }
    }

    /// Sends a command built with a fresh correlation id and waits for its response, polling
    /// `interrupt` while it waits: when it fails, the command is
    /// abandoned (whatever it creates is removed) and its error returned.
    fn request_with<E>(
        &self,
        build: impl FnOnce(i64) -> Command,
        mut interrupt: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Result<Response>, E> {
        if let Err(error) = self.check() {
            return Ok(Err(error));
        }
        let correlation_id = match self.ring.next_correlation_id() {
            Ok(id) => id,
            Err(error) => return Ok(Err(shm(error))),
        };
        lock(&self.inbox).pending.insert(correlation_id);
        let command = build(correlation_id);
        let subscribing = matches!(command, Command::AddSubscription { .. });
        if subscribing {
            lock(&self.inbox).images.insert(correlation_id, Vec::new());
        }
        let outcome = self.wait_for(correlation_id, &command, &mut interrupt);
        match outcome {
            Ok(Ok(Response::Error { code, message, .. })) => {
                if subscribing {
                    lock(&self.inbox).images.remove(&correlation_id);
                }
                Ok(Err(refusal(code, message)))
            }
            Ok(Ok(response)) => Ok(Ok(response)),
            Ok(Err(error)) => {
                self.abandon(correlation_id);
                Ok(Err(error))
            }
            Err(interrupted) => {
                self.abandon(correlation_id);
                Err(interrupted)
            }
        }
    }

    fn wait_for<E>(
        &self,
        correlation_id: i64,
        command: &Command,
        interrupt: &mut impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Result<Response>, E> {
        if let Err(error) = self.send(command) {
            return Ok(Err(error));
        }
        let deadline = Instant::now() + self.command_timeout;
        let mut pause = Duration::from_micros(20);
        loop {
            interrupt()?;
            // Invoker threading: whoever waits runs the driver (one thread at a time; the
            // others find it busy and wait); every waiter's answer lands in the inbox.
            let work = match self.duty_cycle.as_ref().map_or(Ok(0), |cycle| cycle()) {
                Ok(work) => work,
                Err(error) => return Ok(Err(error)),
            };
            if let Err(error) = self.service() {
                return Ok(Err(error));
            }
            if let Some(response) = lock(&self.inbox).responses.remove(&correlation_id) {
                return Ok(Ok(response));
            }
            if let Err(error) = self.check() {
                return Ok(Err(error));
            }
            if Instant::now() >= deadline {
                return Ok(Err(Error::Timeout(format!(
                    "the driver in {} did not answer command {correlation_id} within {} ms",
                    self.dir.display(),
                    self.command_timeout.as_millis()
                ))));
            }
            if work == 0 {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(1));
            }
        }
    }

    /// Opens the log the driver announced: its `/proc/<driver pid>/fd/<fd>` memfd, of the
    /// stream `identity` (`docs/driver-protocol.md`, "Log buffers are sealed memfds").
    fn open_log(&self, log_file: &str, identity: LogIdentity) -> Result<LogBuffer> {
        LogBuffer::open_announced(self.driver_pid, log_file, identity).map_err(shm)
    }
}

/// The error of a driver's refusal: an operating-system failure keeps its errno
/// ([`Error::Os`]); a quota reached is the driver's ([`Error::Driver`], naming the quota);
/// anything else is about the channel or command ([`Error::Config`]).
fn refusal(code: i32, message: String) -> Error {
    if code == error_code::QUOTA_EXCEEDED {
        return Error::Driver(message);
    }
    let errno = code.checked_sub(error_code::OS_ERROR).filter(|errno| *errno > 0);
    match errno {
        Some(errno) => {
            let source = std::io::Error::from_raw_os_error(errno);
            // The driver's text ends with the OS error's own; Error::Os shows it once.
            let suffix = format!(": {source}");
            let context = message.strip_suffix(suffix.as_str()).map(str::to_owned).unwrap_or(message);
            Error::Os { context, source }
        }
        None => Error::Config(message),
    }
}

/// The aligned length of the frame carrying `payload` bytes.
fn frame_length(payload: usize) -> i64 {
    crate::logbuffer::position::align_frame(payload.saturating_add(crate::wire::DATA_HEADER_LENGTH)) as i64
}

/// A client of a standalone driver.
pub struct AttachedClient {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    keepalive: Mutex<Option<JoinHandle<()>>>,
    threading: &'static str,
    on_close: Mutex<Option<OnClose>>,
}

impl AttachedClient {
    /// Attaches to the live driver in `dir`; `driver_timeout` bounds how long a silent driver is
    /// trusted.
    pub fn connect(dir: &Path, driver_timeout: Duration) -> Result<Self> {
        Self::connect_with(dir, driver_timeout, None)
    }

    /// Attaches to a driver this process runs in `dir` (see [`InProcessDriver`]). If attaching
    /// fails, the driver is stopped (`on_close` runs) before the error is returned.
    pub fn connect_in_process(dir: &Path, driver: InProcessDriver) -> Result<Self> {
        let timeout = Duration::from_millis(directory::DRIVER_TIMEOUT_MS as u64);
        Self::connect_with(dir, timeout, Some(driver))
    }

    fn connect_with(dir: &Path, driver_timeout: Duration, in_process: Option<InProcessDriver>) -> Result<Self> {
        let (threading, duty_cycle, on_close, command_timeout, yields_when_idle, wakes) = match in_process {
            Some(InProcessDriver {
                threading,
                duty_cycle,
                on_close,
                command_timeout,
                yields_when_idle,
                wake,
                data_wake,
            }) => (threading, duty_cycle, Some(on_close), command_timeout, yields_when_idle, (wake, data_wake)),
            None => (STANDALONE_THREADING, None, None, COMMAND_TIMEOUT, false, (None, None)),
        };
        let attached = Self::attach(dir, driver_timeout, duty_cycle, on_close.is_some(), command_timeout);
        match attached {
            Ok((shared, stop, keepalive)) => Ok(Self {
                shared: {
                    shared.yields_when_idle.store(yields_when_idle, Ordering::Relaxed);
                    if let Some(wake) = wakes.0 {
                        let _ = shared.wake.set(wake);
                    }
                    if let Some(wake) = wakes.1 {
                        let _ = shared.data_wake.set(wake);
                    }
                    shared
                },
                stop,
                keepalive: Mutex::new(Some(keepalive)),
                threading,
                on_close: Mutex::new(on_close),
            }),
            Err(error) => {
                if let Some(on_close) = on_close {
                    on_close(None);
                }
                Err(error)
            }
        }
    }

    fn attach(
        dir: &Path,
        driver_timeout: Duration,
        duty_cycle: Option<DutyCycle>,
        in_process: bool,
        command_timeout: Duration,
    ) -> Result<(Arc<Shared>, Arc<AtomicBool>, JoinHandle<()>)> {
        let driver_timeout_ms = driver_timeout.as_millis() as i64;
        // A directory this user may not read looks empty or stale: only then is it worth asking
        // the OS why, so a live driver costs no extra open.
        let not_attached = |fallback: String| match directory::access_denied(dir) {
            Some((source, owner)) => {
                let owner = owner.map(|uid| format!(" (it belongs to uid {uid}: a driver's clients run as its user)"));
                let context = format!("cannot attach to the driver in {}{}", dir.display(), owner.unwrap_or_default());
                Error::Os { context, source }
            }
            None => Error::Timeout(fallback),
        };
        match directory::inspect(dir, driver_timeout_ms, epoch_ms()) {
            // A driver's files are trusted only in a real directory of this user that no one
            // else may write (another user's driver could feed this client anything).
            DirectoryState::Live { .. } => directory::check_owner(dir).map_err(shm)?,
            DirectoryState::AeronLive { pid, version, .. } => {
                return Err(shm(crate::shm::ShmError::AeronDriverActive { dir: dir.to_path_buf(), pid, version }))
            }
            DirectoryState::Absent => {
                return Err(not_attached(format!("no driver is running in {} (no {CNC_FILE})", dir.display())))
            }
            DirectoryState::Stale { reason } => {
                return Err(not_attached(format!("no live driver in {}: {reason}", dir.display())))
            }
        }
        let cnc = Cnc::open(&dir.join(CNC_FILE), true).map_err(shm)?;
        let ring = cnc.to_driver().map_err(shm)?;
        let receiver = cnc.to_clients_receiver().map_err(shm)?;
        let client_id = ring.next_correlation_id().map_err(shm)?;
        // Never 0 (0 is "no token": the driver would bind the next token it sees).
        let close_token = getrandom::u64()
            .map_err(|e| Error::Driver(format!("no random close token from the operating system: {e}")))?
            .max(1) as i64;
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            counters: cnc.counters().map_err(shm)?,
            driver_pid: cnc.pid().map_err(shm)?,
            ring,
            cnc,
            client_id,
            close_token,
            driver_timeout_ms,
            driver_dead: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            receiver: Mutex::new((receiver, Vec::new())),
            inbox: Mutex::new(Inbox::default()),
            duty_cycle,
            in_process,
            command_timeout,
            yields_when_idle: AtomicBool::new(false),
            wake: OnceLock::new(),
            data_wake: OnceLock::new(),
        });
        shared.send(&Command::ClientKeepalive { client_id, token: close_token })?;
        let stop = Arc::new(AtomicBool::new(false));
        let keepalive = {
            let shared = Arc::clone(&shared);
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("affinity-keepalive".into())
                .spawn(move || keepalive_loop(&shared, &stop))
                .map_err(Error::Io)?
        };
        Ok((shared, stop, keepalive))
    }

    /// The threading mode: [`STANDALONE_THREADING`] for a driver in another process, else the
    /// in-process driver's mode.
    pub fn threading(&self) -> &'static str {
        self.threading
    }

    /// Invoker threading: runs one duty cycle of the in-process driver (unless another thread
    /// is running one) and reads the driver's answers; returns the work done. Otherwise 0.
    pub fn do_work(&self) -> Result<usize> {
        self.shared.check()?;
        self.shared.invoke()
    }

    /// The counters file of the driver (system counters and per-stream positions).
    pub fn counters(&self) -> &CountersReader {
        &self.shared.counters
    }

    /// `Client.counters()`: the driver-wide counters a client reads, by name
    /// (`dropped_events` adds the events this client dropped itself).
    pub fn system_counters(&self) -> Result<ClientCounters> {
        self.shared.check()?;
        let dropped_here = i64::try_from(lock(&self.shared.inbox).dropped_events).unwrap_or(i64::MAX);
        let read = |counter: SystemCounter| counter.read(&self.shared.counters).map_err(shm);
        Ok(ClientCounters {
            invalid_data_frames: read(SystemCounter::InvalidDataFrames)?,
            duplicate_data_frames: read(SystemCounter::DuplicateDataFrames)?,
            overrun_data_frames: read(SystemCounter::OverrunDataFrames)?,
            inactive_image_frames: read(SystemCounter::InactiveImageFrames)?,
            setups_refused: read(SystemCounter::SetupsRefused)?,
            images_refused: read(SystemCounter::ImagesRefused)?,
            images_ended_incomplete: read(SystemCounter::ImagesEndedIncomplete)?,
            invalid_control_frames: read(SystemCounter::InvalidControlFrames)?,
            send_errors: read(SystemCounter::SendErrors)?,
            dropped_events: read(SystemCounter::DroppedEvents)?.saturating_add(dropped_here),
        })
    }

    /// The driver events of this client's publications since the last call, oldest first.
    pub fn drain_events(&self) -> Result<Vec<DriverEventInfo>> {
        self.shared.check()?;
        self.shared.service()?;
        Ok(lock(&self.shared.inbox).events.drain(..).collect())
    }

    /// This client's id (allocated by the driver's correlation counter).
    pub fn client_id(&self) -> i64 {
        self.shared.client_id
    }

    /// Waits at most `timeout` for data: with a threaded driver in this process, until its
    /// receiver has written received data into the logs (any subscription's; the caller polls
    /// to see whether some is its own); otherwise (a standalone driver, invoker threading) it
    /// sleeps `timeout`. What an idle polling thread calls instead of sleeping.
    pub fn wait_for_data(&self, timeout: Duration) {
        match self.shared.data_wake.get() {
            Some(wake) => wake.wait(timeout),
            None => std::thread::sleep(timeout),
        }
    }

    /// Whether [`Self::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Relaxed)
    }

    /// The directory of the driver this client is attached to.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The driver's process id.
    pub fn driver_pid(&self) -> i64 {
        self.shared.driver_pid
    }

    /// Adds a publication (`aeron:ipc`); publishers of one stream share one log.
    pub fn add_publication(&self, channel: &str, stream_id: i32) -> Result<AttachedPublication> {
        uninterrupted(|interrupt| self.add_publication_with(channel, stream_id, interrupt))
    }

    /// [`Self::add_publication`], polling `interrupt` while the driver answers: either the
    /// publication is returned or the error is, and then the driver keeps nothing of it.
    pub fn add_publication_with<E>(
        &self,
        channel: &str,
        stream_id: i32,
        interrupt: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Result<AttachedPublication>, E> {
        self.add_publication_of_kind(channel, stream_id, false, interrupt)
    }

    /// Adds an exclusive publication (Aeron's `addExclusivePublication`; `aeron:ipc` or
    /// `aeron:udp`): a log and session of its own, which no other publication joins, appended
    /// to by its one owner without atomic read-modify-writes ([`ExclusivePublication`]).
    pub fn add_exclusive_publication(&self, channel: &str, stream_id: i32) -> Result<ExclusivePublication> {
        uninterrupted(|interrupt| self.add_exclusive_publication_with(channel, stream_id, interrupt))
    }

    /// [`Self::add_exclusive_publication`], polling `interrupt` while the driver answers (same
    /// guarantee as [`Self::add_publication_with`]).
    pub fn add_exclusive_publication_with<E>(
        &self,
        channel: &str,
        stream_id: i32,
        interrupt: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Result<ExclusivePublication>, E> {
        let publication = self.add_publication_of_kind(channel, stream_id, true, interrupt)?;
        // A log the appender cannot start from is refused; dropping the publication removes it.
        Ok(publication.and_then(|publication| {
            let appender = ExclusiveAppender::new(publication.log.clone()).map_err(shm)?;
            Ok(ExclusivePublication { publication, appender })
        }))
    }

    fn add_publication_of_kind<E>(
        &self,
        channel: &str,
        stream_id: i32,
        exclusive: bool,
        interrupt: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Result<AttachedPublication>, E> {
        let client_id = self.shared.client_id;
        let response = self.shared.request_with(
            |correlation_id| Command::AddPublication {
                client_id,
                correlation_id,
                stream_id,
                channel: channel.to_string(),
                exclusive,
            },
            interrupt,
        )?;
        Ok(response.and_then(|response| self.publication_from(response, stream_id)))
    }

    fn publication_from(&self, response: Response, stream_id: i32) -> Result<AttachedPublication> {
        let Response::PublicationReady { registration_id, session_id, publisher_limit_counter_id, log_file, .. } =
            response
        else {
            return Err(Error::Driver(format!("unexpected answer to add_publication: {response:?}")));
        };
        let opened = self.shared.open_log(&log_file, LogIdentity { session_id, stream_id }).and_then(|log| {
            let limit = self.shared.counters.counter(publisher_limit_counter_id as usize).map_err(shm)?;
            Ok((log, limit))
        });
        let publication = match opened {
            Ok((log, limit)) => {
                // (The inbox counted this handle when the answer arrived.)
                AttachedPublication {
                    shared: Arc::clone(&self.shared),
                    registration_id,
                    session_id,
                    stream_id,
                    log,
                    limit,
                    cached_limit: AtomicI64::new(i64::MIN),
                    offers: AtomicU64::new(0),
                }
            }
            Err(error) => {
                // Hand back nothing: the driver removes what it made.
                forget_publication_handle(&mut lock(&self.shared.inbox), registration_id);
                self.shared.remove_publication(registration_id);
                return Err(error);
            }
        };
        Ok(publication)
    }

    /// Adds a subscription (`aeron:ipc`); images arrive as publications appear.
    pub fn add_subscription(&self, channel: &str, stream_id: i32) -> Result<AttachedSubscription> {
        uninterrupted(|interrupt| self.add_subscription_with(channel, stream_id, interrupt))
    }

    /// [`Self::add_subscription`], polling `interrupt` while the driver answers (same guarantee
    /// as [`Self::add_publication_with`]).
    pub fn add_subscription_with<E>(
        &self,
        channel: &str,
        stream_id: i32,
        interrupt: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Result<AttachedSubscription>, E> {
        let client_id = self.shared.client_id;
        let response = self.shared.request_with(
            |correlation_id| Command::AddSubscription {
                client_id,
                correlation_id,
                stream_id,
                channel: channel.to_string(),
            },
            interrupt,
        )?;
        Ok(response.and_then(|response| self.subscription_from(response, stream_id)))
    }

    fn subscription_from(&self, response: Response, stream_id: i32) -> Result<AttachedSubscription> {
        let Response::SubscriptionReady { correlation_id } = response else {
            return Err(Error::Driver(format!("unexpected answer to add_subscription: {response:?}")));
        };
        Ok(AttachedSubscription {
            shared: Arc::clone(&self.shared),
            registration_id: correlation_id,
            stream_id,
            images: Vec::new(),
            generation: u64::MAX,
            scratch: Vec::new(),
        })
    }

    /// Closes the client: the driver releases its resources now (publications linger).
    pub fn close(&self) {
        self.close_within(None);
    }

    /// Closes the client; a driver in this process drains its publications for at most `drain`
    /// (`None`: the driver's own bound) before it stops. Returns what was left unsent (empty
    /// when the client was already closed, and with a standalone driver).
    pub fn close_within(&self, drain: Option<Duration>) -> Unsent {
        if self.shared.closed.swap(true, Ordering::Relaxed) {
            return Unsent::default();
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = lock(&self.keepalive).take() {
            let _ = handle.join();
        }
        let _ = self
            .shared
            .send(&Command::ClientClose { client_id: self.shared.client_id, token: self.shared.close_token });
        let on_close = lock(&self.on_close).take();
        on_close.map(|on_close| on_close(drain)).unwrap_or_default()
    }
}

impl Drop for AttachedClient {
    fn drop(&mut self) {
        self.close();
    }
}

fn keepalive_loop(shared: &Shared, stop: &AtomicBool) {
    let mut last_keepalive = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
        let _ = shared.service();
        if last_keepalive.elapsed() >= KEEPALIVE_INTERVAL {
            last_keepalive = Instant::now();
            let _ = shared.send(&Command::ClientKeepalive { client_id: shared.client_id, token: shared.close_token });
            let age = shared.cnc.driver_heartbeat_ms().map(|beat| epoch_ms().saturating_sub(beat)).unwrap_or(i64::MAX);
            // A driver in this process ends with it (and with invoker threading beats only
            // when the application runs it).
            if !shared.in_process && age > shared.driver_timeout_ms {
                shared.driver_dead.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// What an offer did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachedOffer {
    /// Appended; the new stream position.
    Position(i64),
    /// The slowest subscriber is a publication window behind: retry later.
    BackPressured,
    /// No subscriber: nothing is written.
    NotConnected,
    /// The log rotated: retry now.
    AdminAction,
    /// The stream reached its largest position.
    MaxPositionExceeded,
}

/// A publication in a standalone driver's shared log.
pub struct AttachedPublication {
    shared: Arc<Shared>,
    registration_id: i64,
    session_id: i32,
    stream_id: i32,
    log: LogBuffer,
    limit: Counter,
    /// The publisher limit last read from `limit`: offers compare against it and read the
    /// counter again only when it is reached (or while no subscriber is connected).
    cached_limit: AtomicI64,
    /// Invoker threading: offers since the driver last ran (see [`Self::invoke_if_due`]).
    offers: AtomicU64,
}

impl AttachedPublication {
    /// Whether this publication's client was closed (or reclaimed by the driver).
    pub fn is_client_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Relaxed)
    }

    /// Registration id (shared by all publishers of the stream).
    pub fn registration_id(&self) -> i64 {
        self.registration_id
    }

    /// Session id of the log.
    pub fn session_id(&self) -> i32 {
        self.session_id
    }

    /// Stream id.
    pub fn stream_id(&self) -> i32 {
        self.stream_id
    }

    /// Largest message accepted.
    pub fn max_message_length(&self) -> usize {
        self.log.max_message_length()
    }

    /// Term length of the log.
    pub fn term_length(&self) -> u32 {
        self.log.term_length()
    }

    /// Initial term id of the log.
    pub fn initial_term_id(&self) -> i32 {
        self.log.initial_term_id()
    }

    /// Appends one message (lock-free; any number of threads and processes may offer at once).
    ///
    /// Goes straight to the log's one-message appender ([`LogBuffer::offer`]), inlined here,
    /// not through the batch entry point: the same checks (client and driver, connected flag,
    /// length, the log's metadata on every claim) without the batch layer's calls. Only an
    /// append is handled inline; a refusal goes to `offer_refused`, out of line, which
    /// does what `append_with` does with one (the same limits, the same outcomes).
    #[inline]
    pub fn offer(&self, payload: &[u8]) -> Result<AttachedOffer> {
        self.offer_with(payload, |payload, limit| self.log.offer(payload, 0, limit))
    }

    /// [`Self::offer`] through `append` (an appender of this publication's log: the payload
    /// appended below the publisher limit it is given).
    #[inline(always)]
    fn offer_with<F>(&self, payload: &[u8], mut append: F) -> Result<AttachedOffer>
    where
        F: FnMut(&[u8], i64) -> std::result::Result<Offer, crate::shm::ShmError>,
    {
        self.shared.check()?;
        let connected = self.log.is_connected().map_err(shm)?;
        let limit = if connected { self.cached_limit.load(Ordering::Relaxed) } else { self.refresh_limit()? };
        match append(payload, limit).map_err(shm)? {
            Offer::Appended(position) => Ok(AttachedOffer::Position(position)),
            refusal => self.offer_refused(payload, connected, limit, refusal, append),
        }
    }

    /// [`Self::offer_with`] after `refusal` at `limit`: when back-pressured while connected, the
    /// publisher limit is read again and the offer retried once if it moved, as in
    /// [`Self::append_with`]; then the outcome.
    #[cold]
    #[inline(never)]
    fn offer_refused<F>(
        &self,
        payload: &[u8],
        connected: bool,
        limit: i64,
        refusal: Offer,
        mut append: F,
    ) -> Result<AttachedOffer>
    where
        F: FnMut(&[u8], i64) -> std::result::Result<Offer, crate::shm::ShmError>,
    {
        let mut outcome = refusal;
        if outcome == Offer::BackPressured && connected {
            let fresh = self.refresh_limit()?;
            if fresh > limit {
                outcome = append(payload, fresh).map_err(shm)?;
            }
        }
        self.outcome(outcome)
    }

    /// Runs `offer` (an append into the log below the publisher limit it is given: how many
    /// messages it took and the outcome) with the publisher limit. The limit is the cached one
    /// while a subscriber is connected; the counter is read again when the cached limit is
    /// reached (and `offer` retried once with the fresh limit), and on every offer while none is
    /// connected (so that offers then report [`AttachedOffer::NotConnected`] at once).
    #[inline]
    fn append_with<F>(&self, mut offer: F) -> Result<(usize, AttachedOffer)>
    where
        F: FnMut(i64) -> std::result::Result<(usize, Offer), crate::shm::ShmError>,
    {
        let connected = self.log.is_connected().map_err(shm)?;
        let mut limit = self.cached_limit.load(Ordering::Relaxed);
        if !connected {
            limit = self.refresh_limit()?;
        }
        let (mut taken, mut outcome) = offer(limit).map_err(shm)?;
        if outcome == Offer::BackPressured && connected {
            let fresh = self.refresh_limit()?;
            if fresh > limit {
                (taken, outcome) = offer(fresh).map_err(shm)?;
            }
        }
        Ok((taken, self.outcome(outcome)?))
    }

    /// What an offer's `outcome` in the log means to the caller (back pressure without a
    /// connected subscriber is [`AttachedOffer::NotConnected`]).
    #[inline]
    fn outcome(&self, outcome: Offer) -> Result<AttachedOffer> {
        Ok(match outcome {
            Offer::Appended(position) => AttachedOffer::Position(position),
            Offer::BackPressured if !self.log.is_connected().map_err(shm)? => AttachedOffer::NotConnected,
            Offer::BackPressured => AttachedOffer::BackPressured,
            Offer::AdminAction => AttachedOffer::AdminAction,
            Offer::MaxPositionExceeded => AttachedOffer::MaxPositionExceeded,
        })
    }

    /// Invoker threading (no driver thread): runs one driver duty cycle when an offer was
    /// refused, else every [`INVOKE_EVERY_OFFERS`] offers, so that the driver sends what is
    /// appended and raises the limit. Without a duty cycle, nothing.
    fn invoke_if_due(&self, refused: bool) -> Result<()> {
        if self.shared.duty_cycle.is_some()
            && (refused || self.offers.fetch_add(1, Ordering::Relaxed) % INVOKE_EVERY_OFFERS == 0)
        {
            self.shared.invoke()?;
        } else if refused {
            self.shared.idle();
        }
        Ok(())
    }

    fn refresh_limit(&self) -> Result<i64> {
        let limit = self.limit.get().map_err(shm)?;
        self.cached_limit.store(limit, Ordering::Relaxed);
        Ok(limit)
    }

    /// The end of the last appended message.
    pub fn position(&self) -> Result<i64> {
        self.log.tail_position().map_err(shm)
    }

    /// Appends one message with the embedded publication's contract: `Ok(Ok(position))`,
    /// `Ok(Err(refusal))` (an admin action is retried once at once; a message too long is
    /// [`OfferError::MessageTooLong`]), `Err` when the client is closed or the driver dead.
    pub fn try_offer(&self, payload: &[u8]) -> Result<std::result::Result<i64, OfferError>> {
        self.try_offer_with(payload, |payload| self.offer(payload))
    }

    /// [`Self::try_offer`] through `offer` (this publication's [`Self::offer`] or an exclusive
    /// publication's).
    fn try_offer_with<F>(&self, payload: &[u8], mut offer: F) -> Result<std::result::Result<i64, OfferError>>
    where
        F: FnMut(&[u8]) -> Result<AttachedOffer>,
    {
        let max = self.log.max_message_length();
        if payload.len() > max {
            return Ok(Err(OfferError::MessageTooLong { length: payload.len(), max }));
        }
        let mut outcome = offer(payload)?;
        if outcome == AttachedOffer::AdminAction {
            outcome = offer(payload)?;
        }
        let appended = matches!(outcome, AttachedOffer::Position(_));
        if appended {
            self.shared.wake_driver();
        }
        self.invoke_if_due(!appended)?;
        Ok(match outcome {
            AttachedOffer::Position(position) => Ok(position),
            AttachedOffer::BackPressured => Err(OfferError::BackPressured),
            AttachedOffer::NotConnected => Err(OfferError::NotConnected),
            AttachedOffer::AdminAction => Err(OfferError::AdminAction),
            AttachedOffer::MaxPositionExceeded => Err(OfferError::MaxPositionExceeded),
        })
    }

    /// Appends messages in order until one is refused, with the embedded publication's contract:
    /// returns how many were taken and the refusal that stopped the batch (an admin action is
    /// retried at once; a message too long is [`OfferError::MessageTooLong`]). A dead driver or
    /// closed client is an `Err` ([`Error::Timeout`] / [`Error::Closed`]).
    ///
    /// Up to [`BATCH_CLAIM_MESSAGES`] messages are appended with one claim on the log's tail
    /// (`docs/driver-protocol.md`, batch claim), each framed and committed as a single offer.
    pub fn offer_batch<'a, I>(&self, messages: I) -> Result<(usize, Option<OfferError>)>
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        self.offer_batch_with(messages, |messages, limit| self.log.offer_batch(messages, 0, limit))
    }

    /// [`Self::offer_batch`] through `append` (an appender of this publication's log: a prefix
    /// of the messages appended with one claim below the publisher limit it is given).
    fn offer_batch_with<'a, I, F>(&self, messages: I, mut append: F) -> Result<(usize, Option<OfferError>)>
    where
        I: IntoIterator<Item = &'a [u8]>,
        F: FnMut(&[&[u8]], i64) -> std::result::Result<(usize, Offer), crate::shm::ShmError>,
    {
        let max = self.log.max_message_length();
        let mut messages = messages.into_iter();
        let mut chunk: Vec<&[u8]> = Vec::with_capacity(BATCH_CLAIM_MESSAGES);
        let mut taken = 0;
        loop {
            chunk.clear();
            let mut too_long = None;
            for message in messages.by_ref() {
                if message.len() > max {
                    too_long = Some(message.len());
                    break;
                }
                chunk.push(message);
                if chunk.len() == BATCH_CLAIM_MESSAGES {
                    break;
                }
            }
            let mut done = 0;
            let mut admin_retries = 0;
            while done < chunk.len() {
                self.shared.check()?;
                let (appended, outcome) = self.append_with(|limit| append(&chunk[done..], limit))?;
                if appended > 0 {
                    self.shared.wake_driver();
                }
                done += appended;
                taken += appended;
                let refusal = match outcome {
                    AttachedOffer::Position(_) => {
                        admin_retries = 0;
                        continue;
                    }
                    AttachedOffer::AdminAction if admin_retries < ADMIN_RETRIES => {
                        admin_retries += 1;
                        continue;
                    }
                    AttachedOffer::AdminAction => OfferError::AdminAction,
                    AttachedOffer::BackPressured => OfferError::BackPressured,
                    AttachedOffer::NotConnected => OfferError::NotConnected,
                    AttachedOffer::MaxPositionExceeded => OfferError::MaxPositionExceeded,
                };
                self.invoke_if_due(true)?;
                return Ok((taken, Some(refusal)));
            }
            if let Some(length) = too_long {
                self.invoke_if_due(true)?;
                return Ok((taken, Some(OfferError::MessageTooLong { length, max })));
            }
            if chunk.len() < BATCH_CLAIM_MESSAGES {
                self.invoke_if_due(true)?;
                return Ok((taken, None));
            }
        }
    }

    /// Whether a subscriber is attached.
    pub fn is_connected(&self) -> Result<bool> {
        self.shared.invoke()?;
        self.log.is_connected().map_err(shm)
    }

    /// `Publication.counters()`: the driver's status record of this publication
    /// ([`Command::QueryPublication`]).
    pub fn status(&self) -> Result<PublicationInfo> {
        let (client_id, registration_id) = (self.shared.client_id, self.registration_id);
        let response = self
            .shared
            .query(|correlation_id| Command::QueryPublication { client_id, correlation_id, registration_id })
            .map_err(|error| match error {
                // The driver's refusal of a query is about its state, not the channel.
                Error::Config(message) => Error::Driver(message),
                other => other,
            })?;
        match response {
            Response::PublicationStatus { json, .. } => serde_json::from_str(&json)
                .map_err(|e| Error::Driver(format!("publication {registration_id}: unreadable status record: {e}"))),
            other => Err(Error::Driver(format!("unexpected answer to a publication query: {other:?}"))),
        }
    }
}

/// An exclusive publication (Aeron's `ExclusivePublication`,
/// [`AttachedClient::add_exclusive_publication`]): the only writer of a log of its own. Offers
/// take `&mut self` and append with the [`ExclusiveAppender`]: the term offset is kept here and
/// the log's tail advanced with a plain store, not claimed with an atomic add. Everything else
/// (limits, outcomes, the driver's part) is the [`AttachedPublication`]'s; to share one
/// between threads, put it behind a lock (a stream with many writers is what
/// [`AttachedClient::add_publication`] is for).
pub struct ExclusivePublication {
    publication: AttachedPublication,
    appender: ExclusiveAppender,
}

impl ExclusivePublication {
    /// Appends one message: [`AttachedPublication::offer`]'s outcomes.
    #[inline]
    pub fn offer(&mut self, payload: &[u8]) -> Result<AttachedOffer> {
        let appender = &mut self.appender;
        self.publication.offer_with(payload, |payload, limit| appender.offer(payload, 0, limit))
    }

    /// Appends one message with the embedded publication's contract
    /// ([`AttachedPublication::try_offer`]).
    pub fn try_offer(&mut self, payload: &[u8]) -> Result<std::result::Result<i64, OfferError>> {
        let Self { publication, appender } = self;
        publication.try_offer_with(payload, |payload| {
            publication.offer_with(payload, |payload, limit| appender.offer(payload, 0, limit))
        })
    }

    /// Appends messages in order until one is refused ([`AttachedPublication::offer_batch`]'s
    /// contract): up to [`BATCH_CLAIM_MESSAGES`] per append into the log.
    pub fn offer_batch<'a, I>(&mut self, messages: I) -> Result<(usize, Option<OfferError>)>
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        let appender = &mut self.appender;
        self.publication.offer_batch_with(messages, |messages, limit| appender.offer_batch(messages, 0, limit))
    }

    /// The end of the last appended message.
    pub fn position(&self) -> i64 {
        self.appender.position()
    }

    /// Whether a subscriber is attached.
    pub fn is_connected(&self) -> Result<bool> {
        self.publication.is_connected()
    }

    /// Whether this publication's client was closed (or reclaimed by the driver).
    pub fn is_client_closed(&self) -> bool {
        self.publication.is_client_closed()
    }

    /// Registration id (this publication's alone).
    pub fn registration_id(&self) -> i64 {
        self.publication.registration_id()
    }

    /// Session id of the log (this publication's alone).
    pub fn session_id(&self) -> i32 {
        self.publication.session_id()
    }

    /// Stream id.
    pub fn stream_id(&self) -> i32 {
        self.publication.stream_id()
    }

    /// Largest message accepted.
    pub fn max_message_length(&self) -> usize {
        self.publication.max_message_length()
    }

    /// Term length of the log.
    pub fn term_length(&self) -> u32 {
        self.publication.term_length()
    }

    /// The driver's status record of this publication ([`AttachedPublication::status`]).
    pub fn status(&self) -> Result<PublicationInfo> {
        self.publication.status()
    }
}

impl Drop for AttachedPublication {
    fn drop(&mut self) {
        forget_publication_handle(&mut lock(&self.shared.inbox), self.registration_id);
        if self.shared.check().is_ok() {
            self.shared.remove_publication(self.registration_id);
        }
    }
}

struct AttachedImage {
    correlation_id: i64,
    session_id: i32,
    log: LogBuffer,
    position_counter: Counter,
    position: i64,
    assembly: Vec<u8>,
    closing: bool,
}

/// A subscription to a standalone driver's logs.
pub struct AttachedSubscription {
    shared: Arc<Shared>,
    registration_id: i64,
    stream_id: i32,
    images: Vec<AttachedImage>,
    generation: u64,
    scratch: Vec<u8>,
}

impl AttachedSubscription {
    /// Whether this subscription's client was closed (or reclaimed by the driver).
    pub fn is_client_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Relaxed)
    }

    /// Registration id.
    pub fn registration_id(&self) -> i64 {
        self.registration_id
    }

    /// Stream id.
    pub fn stream_id(&self) -> i32 {
        self.stream_id
    }

    /// Number of images (publications) currently attached.
    pub fn image_count(&mut self) -> Result<usize> {
        self.refresh()?;
        Ok(self.images.len())
    }

    fn refresh(&mut self) -> Result<()> {
        let generation = self.shared.generation.load(Ordering::Acquire);
        if generation == self.generation {
            return Ok(());
        }
        self.generation = generation;
        let mut inbox = lock(&self.shared.inbox);
        let Inbox { images, gone, .. } = &mut *inbox;
        let Some(infos) = images.get_mut(&self.registration_id) else { return Ok(()) };
        for info in infos.drain(..) {
            let identity = LogIdentity { session_id: info.session_id, stream_id: self.stream_id };
            let log = self.shared.open_log(&info.log_file, identity)?;
            let position_counter = self.shared.counters.counter(info.position_counter_id as usize).map_err(shm)?;
            let position = position_counter.get().map_err(shm)?;
            self.images.push(AttachedImage {
                correlation_id: info.correlation_id,
                session_id: info.session_id,
                log,
                position_counter,
                position,
                assembly: Vec::new(),
                closing: false,
            });
        }
        for image in &mut self.images {
            if gone.remove(&image.correlation_id) {
                image.closing = true;
            }
        }
        Ok(())
    }

    /// Delivers up to `fragment_limit` messages (fragmented messages reassembled) to `handler`;
    /// returns how many fragments were consumed.
    pub fn poll<F: FnMut(&[u8])>(&mut self, fragment_limit: usize, mut handler: F) -> Result<usize> {
        self.shared.check()?;
        self.shared.invoke()?;
        self.refresh()?;
        let mut fragments = 0;
        let scratch = &mut self.scratch;
        for image in &mut self.images {
            if fragments >= fragment_limit {
                break;
            }
            let assembly = &mut image.assembly;
            let mut count = 0;
            let position = image
                .log
                .read(image.position, fragment_limit - fragments, scratch, |header, fragment| {
                    count += 1;
                    if header.flags & flags::UNFRAGMENTED == flags::UNFRAGMENTED {
                        handler(fragment);
                        return;
                    }
                    if header.flags & flags::BEGIN != 0 {
                        assembly.clear();
                    }
                    assembly.extend_from_slice(fragment);
                    if header.flags & flags::END != 0 {
                        handler(assembly);
                        assembly.clear();
                    }
                })
                .map_err(shm)?;
            fragments += count;
            if position != image.position {
                image.position = position;
                image.position_counter.set(position).map_err(shm)?;
            }
        }
        self.images
            .retain(|image| !image.closing || image.position < image.log.end_of_stream_position().unwrap_or(i64::MIN));
        if fragments == 0 {
            self.shared.idle();
        }
        Ok(fragments)
    }
}

impl AttachedSubscription {
    /// Appends up to `fragment_limit` fragments' worth of whole messages, with their headers, to
    /// `batch` (the embedded subscription's `poll_into` contract); returns fragments consumed.
    pub fn poll_into(&mut self, batch: &mut MessageBatch, fragment_limit: usize) -> Result<usize> {
        self.shared.check()?;
        self.shared.invoke()?;
        self.refresh()?;
        let mut fragments = 0;
        let stream_id = self.stream_id;
        let scratch = &mut self.scratch;
        for image in &mut self.images {
            if fragments >= fragment_limit {
                break;
            }
            let session_id = image.session_id;
            let assembly = &mut image.assembly;
            let mut count = 0;
            let position = image
                .log
                .read(image.position, fragment_limit - fragments, scratch, |header, fragment| {
                    count += 1;
                    let message_header = || MessageHeader {
                        session_id,
                        stream_id,
                        // The frame's end: where the next message starts.
                        position: header.position.saturating_add(frame_length(fragment.len())),
                        term_id: header.term_id,
                        term_offset: header.term_offset as i32,
                        flags: header.flags,
                        reserved_value: header.reserved_value,
                    };
                    if header.flags & flags::UNFRAGMENTED == flags::UNFRAGMENTED {
                        batch.push_message(fragment, message_header());
                        return;
                    }
                    if header.flags & flags::BEGIN != 0 {
                        assembly.clear();
                    }
                    assembly.extend_from_slice(fragment);
                    if header.flags & flags::END != 0 {
                        batch.push_message(assembly, message_header());
                        assembly.clear();
                    }
                })
                .map_err(shm)?;
            fragments += count;
            if position != image.position {
                image.position = position;
                image.position_counter.set(position).map_err(shm)?;
            }
        }
        self.images
            .retain(|image| !image.closing || image.position < image.log.end_of_stream_position().unwrap_or(i64::MIN));
        if fragments == 0 {
            self.shared.idle();
        }
        Ok(fragments)
    }

    /// Whether at least one publication's image is attached.
    pub fn is_connected(&mut self) -> Result<bool> {
        self.shared.invoke()?;
        Ok(self.image_count()? > 0)
    }

    /// `Subscription.images()`: the driver's record of each image
    /// ([`Command::QuerySubscription`]).
    pub fn images(&self) -> Result<Vec<crate::shm::status::ImageInfo>> {
        let (client_id, registration_id) = (self.shared.client_id, self.registration_id);
        let response = self
            .shared
            .query(|correlation_id| Command::QuerySubscription { client_id, correlation_id, registration_id })
            .map_err(|error| match error {
                // The driver's refusal of a query is about its state, not the channel.
                Error::Config(message) => Error::Driver(message),
                other => other,
            })?;
        match response {
            Response::SubscriptionStatus { json, .. } => serde_json::from_str(&json)
                .map_err(|e| Error::Driver(format!("subscription {registration_id}: unreadable status record: {e}"))),
            other => Err(Error::Driver(format!("unexpected answer to a subscription query: {other:?}"))),
        }
    }
}

impl Drop for AttachedSubscription {
    fn drop(&mut self) {
        lock(&self.shared.inbox).images.remove(&self.registration_id);
        if self.shared.check().is_ok() {
            self.shared.remove_subscription(self.registration_id);
        }
    }
}

/// `Client.counters()`: the driver-wide system counters a client reads (the Python
/// `DriverCounters` has exactly these fields).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientCounters {
    /// Malformed datagrams dropped (and only those: duplicates, overruns and frames for
    /// inactive images have their own counters).
    pub invalid_data_frames: i64,
    /// Data datagrams entirely below an image's rebuild position.
    pub duplicate_data_frames: i64,
    /// Data datagrams beyond an image's receiver window.
    pub overrun_data_frames: i64,
    /// Data datagrams for an image no longer receiving.
    pub inactive_image_frames: i64,
    /// SETUP frames refused (fields inconsistent with each other).
    pub setups_refused: i64,
    /// Images refused because the subscription holds the maximum.
    pub images_refused: i64,
    /// Images that ended with data missing.
    pub images_ended_incomplete: i64,
    /// Malformed control frames (SM, NAK, RTTM, ERR) dropped.
    pub invalid_control_frames: i64,
    /// Datagrams the socket refused to send.
    pub send_errors: i64,
    /// Driver events dropped by the driver, plus those this client's full event log dropped.
    pub dropped_events: i64,
}

/// The answer of a `*_with` call made with an interrupt that never fires (the plain methods).
pub(crate) fn uninterrupted<T>(
    call: impl FnOnce(
        fn() -> std::result::Result<(), std::convert::Infallible>,
    ) -> std::result::Result<T, std::convert::Infallible>,
) -> T {
    match call(|| Ok(())) {
        Ok(value) => value,
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::status::DriverEventKindInfo;

    const CLIENT: i64 = 1;

    fn ready(correlation_id: i64, registration_id: i64) -> Response {
        Response::PublicationReady {
            correlation_id,
            registration_id,
            session_id: 5,
            stream_id: 10,
            publisher_limit_counter_id: 3,
            log_file: "publications/5.logbuffer".into(),
        }
    }

    fn joined(registration_id: i64) -> Response {
        let event = DriverEventInfo {
            time: 0.0,
            level: "INFO".into(),
            channel: "aeron:udp?endpoint=127.0.0.1:40123".into(),
            stream_id: 10,
            session_id: 5,
            kind: DriverEventKindInfo::ReceiverJoined { receiver_id: 9, group_tag: None },
            message: "INFO receiver joined: receiver_id=9".into(),
        };
        Response::DriverEvent {
            publication_registration_id: registration_id,
            json: serde_json::to_string(&event).unwrap(),
        }
    }

    #[test]
    fn a_driver_event_in_the_same_batch_as_its_publication_ready_is_kept() {
        let mut inbox = Inbox::default();
        inbox.pending.insert(7);
        // One service pass: the answer and the publication's first event, before the caller
        // has taken the answer.
        assert_eq!(inbox.apply(ready(7, 70), CLIENT), Applied::Nothing);
        assert_eq!(inbox.apply(joined(70), CLIENT), Applied::Nothing);
        assert!(inbox.responses.contains_key(&7), "the answer waits for its caller");
        assert_eq!(inbox.events.len(), 1, "the event was dropped");
        assert!(matches!(inbox.events[0].kind, DriverEventKindInfo::ReceiverJoined { receiver_id: 9, .. }));
    }

    #[test]
    fn events_of_publications_without_a_handle_here_are_not_kept() {
        let mut inbox = Inbox::default();
        inbox.pending.insert(7);
        assert_eq!(inbox.apply(joined(70), CLIENT), Applied::Nothing);
        inbox.apply(ready(7, 70), CLIENT);
        forget_publication_handle(&mut inbox, 70);
        inbox.apply(joined(70), CLIENT);
        assert!(inbox.events.is_empty(), "{:?}", inbox.events);
    }

    #[test]
    fn an_answer_whose_caller_gave_up_is_handed_back_for_undoing_and_not_counted() {
        let mut inbox = Inbox::default();
        inbox.abandoned.insert(8);
        assert_eq!(inbox.apply(ready(8, 80), CLIENT), Applied::Abandoned(ready(8, 80)));
        assert!(inbox.responses.is_empty() && inbox.publications.is_empty() && inbox.abandoned.is_empty());
        // An answer nobody waits for (another client's) changes nothing.
        assert_eq!(inbox.apply(ready(9, 90), CLIENT), Applied::Nothing);
        assert!(inbox.responses.is_empty());
    }

    #[test]
    fn only_this_clients_timeout_closes_it() {
        let mut inbox = Inbox::default();
        assert_eq!(inbox.apply(Response::ClientTimeout { client_id: CLIENT + 1 }, CLIENT), Applied::Nothing);
        assert_eq!(inbox.apply(Response::ClientTimeout { client_id: CLIENT }, CLIENT), Applied::ClientTimedOut);
    }
}
