//! The media driver: conductor, sender and receiver agents, run on a driver thread (shared
//! mode) or by the application (invoker mode).

pub mod agent;
pub mod conductor;
pub mod context;
pub mod events;
pub mod idle;
pub mod ipc;
pub mod receiver;
pub mod reply;
pub mod sender;
pub mod standalone;
pub mod transmit;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::thread::JoinHandle;
use std::time::Duration;

pub use conductor::DriverCommand;
pub use context::{ranges, DriverContext, SettingRange, ThreadingMode};
pub use events::{DriverEvent, DriverEventKind, EventLog};
pub use idle::{IdleStrategy, Idler};
pub use receiver::{DatagramOutcome, ReceiverCounters};
pub use reply::{Reply, ReplySlot};

use crate::error::{Error, Result};
use crate::time::MonotonicClock;
use conductor::Conductor;
use receiver::ReceiverAgent;
use sender::{SenderAgent, SenderCounters};

/// How long a closing driver keeps sending so appended data reaches the receivers.
const SHUTDOWN_DRAIN_LIMIT: Duration = Duration::from_secs(2);
/// How long a client waiting for an answer sleeps between checks while another thread runs the
/// invoker duty cycle.
const REPLY_POLL_STEP: Duration = Duration::from_micros(200);
/// How often a waiting request checks that the driver still runs and asks its caller whether to
/// give up ([`Driver::request_with`]).
pub const INTERRUPT_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// Locks a mutex shared by the driver and its clients.
///
/// A poisoned mutex means a thread panicked while changing the state it guards: that is a bug,
/// and the state may be inconsistent, so it is not recovered silently. The panic names the
/// cause; in shared mode it stops the driver thread (clients then get `DriverError`), in invoker
/// mode it reaches the caller.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(_) => panic!("affinity: a thread panicked while holding a driver lock; the driver state is inconsistent"),
    }
}

/// Locks a mutex, reporting poisoning (see [`lock`]) as an error naming `what` it guards.
pub fn lock_checked<'a, T>(mutex: &'a Mutex<T>, what: &str) -> Result<MutexGuard<'a, T>> {
    mutex.lock().map_err(|_| poisoned(what))
}

fn poisoned(what: &str) -> Error {
    Error::Driver(poisoned_message(what))
}

fn poisoned_message(what: &str) -> String {
    format!("a thread panicked while holding the {what} lock (a bug); the driver stopped")
}

/// The three agents of a driver, run one after the other.
pub struct DriverAgents {
    conductor: Conductor,
    sender: SenderAgent,
    receiver: ReceiverAgent,
    ipc: ipc::IpcAgent,
    clock: MonotonicClock,
}

impl DriverAgents {
    /// One duty cycle of every agent; returns the work done.
    pub fn do_work(&mut self) -> usize {
        let now = self.clock.now();
        let mut work = self.conductor.do_work(now, &mut self.sender, &mut self.receiver, &mut self.ipc);
        work += self.sender.do_work(now);
        work += self.receiver.do_work(now);
        work += self.ipc.do_work(now);
        work
    }

    /// Closes every publication and runs until their data has been sent (bounded).
    fn drain(&mut self) {
        let deadline = std::time::Instant::now() + SHUTDOWN_DRAIN_LIMIT;
        while (self.sender.has_undelivered() || self.ipc.has_undelivered()) && std::time::Instant::now() < deadline {
            if self.do_work() == 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }
}

/// A running embedded media driver.
pub struct Driver {
    context: DriverContext,
    commands: Sender<DriverCommand>,
    invoked: Option<Mutex<DriverAgents>>,
    /// Why the driver stopped working (a poisoned lock, a dead driver thread), once it has.
    failure: OnceLock<String>,
    thread: Mutex<Option<JoinHandle<()>>>,
    shutdown: Arc<AtomicBool>,
    events: Arc<Mutex<EventLog>>,
    sender_counters: Arc<SenderCounters>,
    receiver_counters: Arc<receiver::ReceiverCounters>,
}

impl Driver {
    /// Starts a driver with `context` (a thread in shared mode, nothing in invoker mode).
    pub fn start(context: DriverContext) -> Result<Driver> {
        context.validate()?;
        let (commands, receiver) = mpsc::channel();
        let events = Arc::new(Mutex::new(EventLog::default()));
        let sender = SenderAgent::with_event_log(context.datagrams_per_cycle, events.clone());
        let sender_counters = sender.counters().clone();
        let receiver_agent = ReceiverAgent::new(context.datagrams_per_cycle);
        let receiver_counters = receiver_agent.counters().clone();
        let agents = DriverAgents {
            conductor: Conductor::new(context.clone(), receiver),
            sender,
            receiver: receiver_agent,
            ipc: ipc::IpcAgent::new(context.datagrams_per_cycle),
            clock: MonotonicClock::new(),
        };
        let shutdown = Arc::new(AtomicBool::new(false));
        let (invoked, thread) = match context.threading_mode {
            ThreadingMode::Invoker => (Some(Mutex::new(agents)), None),
            ThreadingMode::Shared => {
                let stop = shutdown.clone();
                let strategy = context.idle_strategy;
                let handle = std::thread::Builder::new()
                    .name("affinity-driver".into())
                    .spawn(move || run_shared(agents, strategy, &stop))
                    .map_err(|e| Error::Driver(format!("cannot start the driver thread: {e}")))?;
                (None, Some(handle))
            }
        };
        Ok(Driver {
            context,
            commands,
            invoked,
            failure: OnceLock::new(),
            thread: Mutex::new(thread),
            shutdown,
            events,
            sender_counters,
            receiver_counters,
        })
    }

    /// Takes the events logged since the last call, oldest first (receivers joining or leaving
    /// flow-control groups, connection changes, error frames). Each formats as one log line.
    pub fn drain_events(&self) -> Vec<DriverEvent> {
        self.do_work();
        lock(&self.events).drain()
    }

    /// Events lost because nobody drained the bounded log in time.
    pub fn dropped_events(&self) -> u64 {
        lock(&self.events).dropped()
    }

    /// Control datagrams the sender could not decode or attribute to a publication.
    pub fn invalid_control_frames(&self) -> u64 {
        self.sender_counters.invalid_frames.load(Ordering::Relaxed)
    }

    /// Data-side datagrams the receiver could not decode (counted and dropped).
    pub fn invalid_data_frames(&self) -> u64 {
        self.receiver_counters.invalid_frames.load(Ordering::Relaxed)
    }

    /// The receiver's counters: malformed, duplicate, overrun and inactive-image datagrams,
    /// refused SETUPs and images, images that ended with data missing.
    pub fn receiver_counters(&self) -> &receiver::ReceiverCounters {
        &self.receiver_counters
    }

    /// Send errors other than "would block".
    pub fn send_errors(&self) -> u64 {
        self.sender_counters.send_errors.load(Ordering::Relaxed)
    }

    /// The driver's settings.
    pub fn context(&self) -> &DriverContext {
        &self.context
    }

    /// Whether the driver was shut down.
    pub fn is_shut_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// `Ok` while the driver works: closed after shutdown, the failure once it failed (a
    /// poisoned lock, a driver thread that died).
    pub fn check_running(&self) -> Result<()> {
        if let Some(failure) = self.failure.get() {
            return Err(Error::Driver(failure.clone()));
        }
        if self.is_shut_down() {
            return Err(Error::Closed("driver"));
        }
        let thread_died = match self.thread.try_lock() {
            Ok(thread) => thread.as_ref().is_some_and(|handle| handle.is_finished()),
            Err(_) => false,
        };
        if thread_died {
            let failure = self.failure.get_or_init(|| "the driver thread stopped unexpectedly".into());
            return Err(Error::Driver(failure.clone()));
        }
        Ok(())
    }

    /// Whether the driver failed (cheap; see [`Driver::check_running`]).
    pub fn has_failed(&self) -> bool {
        self.failure.get().is_some()
    }

    fn fail(&self, reason: String) -> Error {
        Error::Driver(self.failure.get_or_init(|| reason).clone())
    }

    /// One duty cycle in invoker mode if no other thread is running one (0 in shared mode,
    /// where the driver thread does the work). A poisoned driver lock is recorded as the
    /// driver's failure, which [`Driver::check_running`] then reports.
    pub fn do_work(&self) -> usize {
        self.try_do_work().unwrap_or(0)
    }

    /// [`Driver::do_work`], reporting a failed driver as an error.
    pub fn try_do_work(&self) -> Result<usize> {
        match &self.invoked {
            Some(agents) => match agents.try_lock() {
                Ok(mut agents) => Ok(agents.do_work()),
                Err(TryLockError::WouldBlock) => Ok(0),
                Err(TryLockError::Poisoned(_)) => Err(self.fail(poisoned_message("driver agents"))),
            },
            None => Ok(0),
        }
    }

    /// A client call found nothing to do: in shared mode, give the driver thread the CPU
    /// (see [`DriverContext::client_yields_when_idle`]).
    pub fn client_idle(&self) {
        if self.invoked.is_none() && self.context.client_yields_when_idle {
            std::thread::yield_now();
        }
    }

    /// Sends a command without waiting for an answer.
    pub fn send(&self, command: DriverCommand) -> Result<()> {
        self.commands.send(command).map_err(|_| Error::Closed("driver"))?;
        self.try_do_work().map(drop)
    }

    /// Sends a command and waits for its answer, at most the command timeout.
    ///
    /// In invoker mode the caller runs duty cycles itself until the answer arrives, or waits
    /// while another thread runs them. Either the answer arrives (and the resource is the
    /// caller's) or the command is abandoned, in which case the conductor undoes it.
    pub fn request<T>(&self, command: impl FnOnce(Reply<T>) -> DriverCommand) -> Result<T> {
        match self.request_with(command, || Ok::<(), std::convert::Infallible>(())) {
            Ok(answer) => answer,
            Err(never) => match never {},
        }
    }

    /// [`Driver::request`], calling `interrupt` every [`INTERRUPT_CHECK_INTERVAL`] while it
    /// waits: when `interrupt` fails (Ctrl-C in Python), the command is abandoned (undone by
    /// the conductor if it runs later) and its error returned. An answer that arrived first
    /// is returned instead: the resource exists and is the caller's.
    pub fn request_with<T, E>(
        &self,
        command: impl FnOnce(Reply<T>) -> DriverCommand,
        mut interrupt: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Result<T>, E> {
        if let Err(error) = self.check_running() {
            return Ok(Err(error));
        }
        let reply = ReplySlot::new();
        if self.commands.send(command(reply.clone())).is_err() {
            return Ok(Err(Error::Closed("driver")));
        }
        let timeout = self.context.client_command_timeout;
        let started = std::time::Instant::now();
        let deadline = started + timeout;
        let mut next_check = started + INTERRUPT_CHECK_INTERVAL;
        // Gives up: the answer if it arrived meanwhile, else `error` (the command is undone).
        let give_up = |error: Error| match reply.abandon() {
            Ok(Some(answer)) => answer,
            Ok(None) => Err(error),
            Err(poisoned) => Err(poisoned),
        };
        loop {
            let ran = match self.try_do_work() {
                Ok(work) => work,
                Err(error) => return Ok(give_up(error)),
            };
            let answer = if ran == 0 || self.invoked.is_none() {
                // Nothing ran here: the driver thread (or another invoker) answers.
                reply.wait(deadline, self.wait_step())
            } else {
                reply.try_take()
            };
            match answer {
                Ok(Some(answer)) => return Ok(answer),
                Ok(None) => {}
                Err(error) => return Ok(give_up(error)),
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                let error = self
                    .check_running()
                    .err()
                    .unwrap_or_else(|| Error::Timeout(format!("no answer from the driver within {timeout:?}")));
                return Ok(give_up(error));
            }
            if now >= next_check {
                next_check = now + INTERRUPT_CHECK_INTERVAL;
                if let Err(error) = self.check_running() {
                    return Ok(give_up(error));
                }
                if let Err(interrupted) = interrupt() {
                    return match reply.abandon() {
                        Ok(Some(answer)) => Ok(answer),
                        _ => Err(interrupted),
                    };
                }
            }
        }
    }

    /// How long to wait at once for an answer: the whole timeout when a driver thread answers.
    fn wait_step(&self) -> Duration {
        if self.invoked.is_some() {
            REPLY_POLL_STEP
        } else {
            Duration::from_millis(50)
        }
    }

    /// Stops the driver after sending what publications still hold (bounded wait).
    pub fn shutdown(&self) {
        if self.shutdown.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(agents) = &self.invoked {
            if let Ok(mut agents) = agents.lock() {
                agents.drain();
            }
        }
        let thread = match self.thread.lock() {
            Ok(mut thread) => thread.take(),
            Err(_) => None,
        };
        if let Some(thread) = thread {
            thread.thread().unpark();
            if thread.join().is_err() {
                // The driver thread panicked (a bug): calls that still reach it report it.
                self.failure.get_or_init(|| "the driver thread panicked".into());
            }
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn run_shared(mut agents: DriverAgents, strategy: IdleStrategy, stop: &AtomicBool) {
    let mut idler = Idler::new(strategy);
    while !stop.load(Ordering::Acquire) {
        let work = agents.do_work();
        idler.idle(work);
    }
    agents.drain();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invoker() -> Driver {
        Driver::start(DriverContext { threading_mode: ThreadingMode::Invoker, ..DriverContext::default() }).unwrap()
    }

    fn poison<T: Send>(mutex: &Mutex<T>) {
        std::thread::scope(|scope| {
            let holder = scope.spawn(|| {
                let _guard = mutex.lock();
                panic!("a bug while holding the lock");
            });
            assert!(holder.join().is_err());
        });
        assert!(mutex.is_poisoned());
    }

    #[test]
    fn a_poisoned_driver_lock_is_reported_not_recovered() {
        let driver = invoker();
        assert!(driver.check_running().is_ok());
        poison(driver.invoked.as_ref().unwrap());
        let failure = driver.try_do_work().unwrap_err();
        assert!(matches!(&failure, Error::Driver(message) if message.contains("panicked")), "{failure}");
        assert_eq!(driver.do_work(), 0);
        assert!(driver.has_failed());
        assert!(matches!(driver.check_running(), Err(Error::Driver(_))));
        let started = std::time::Instant::now();
        let answer =
            driver.request(|reply| DriverCommand::AddSubscription { channel: "aeron:ipc".into(), stream_id: 1, reply });
        assert!(matches!(answer, Err(Error::Driver(_))));
        assert!(started.elapsed() < Duration::from_secs(1), "a failed driver must not make callers wait");
    }

    #[test]
    #[should_panic(expected = "a thread panicked while holding a driver lock")]
    fn lock_refuses_a_poisoned_mutex() {
        let mutex = Mutex::new(0);
        poison(&mutex);
        drop(lock(&mutex));
    }

    #[test]
    fn invoker_request_waits_while_another_thread_runs_the_duty_cycle() {
        let driver = invoker();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    driver.do_work();
                }
            });
            for stream_id in 0..50 {
                let answer = driver.request(|reply| DriverCommand::AddPublication {
                    channel: "aeron:ipc?term-length=64k".into(),
                    stream_id,
                    reply,
                });
                assert!(answer.is_ok(), "stream {stream_id}: {:?}", answer.err());
            }
            stop.store(true, Ordering::Relaxed);
        });
    }

    #[test]
    fn an_interrupted_request_returns_at_once_and_its_command_is_undone() {
        let context = DriverContext {
            threading_mode: ThreadingMode::Invoker,
            client_command_timeout: Duration::from_secs(60),
            ..DriverContext::default()
        };
        let driver = Driver::start(context).unwrap();
        let mut holder = driver.invoked.as_ref().unwrap().lock().unwrap(); // nobody can run a cycle
        let started = std::time::Instant::now();
        let mut asked = 0;
        let answer = driver.request_with(
            |reply| DriverCommand::AddPublication { channel: "aeron:ipc?term-length=64k".into(), stream_id: 1, reply },
            || {
                asked += 1;
                if asked == 3 {
                    Err("interrupted")
                } else {
                    Ok(())
                }
            },
        );
        assert!(matches!(answer, Err("interrupted")));
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
        // The conductor meets the abandoned command later and must not serve it.
        holder.do_work();
        assert!(!holder.ipc.has_publications(), "an interrupted command left its publication behind");
        drop(holder);
    }

    #[test]
    fn an_unanswered_request_times_out_within_the_command_timeout() {
        let context = DriverContext {
            threading_mode: ThreadingMode::Invoker,
            client_command_timeout: Duration::from_millis(50),
            ..DriverContext::default()
        };
        let driver = Driver::start(context).unwrap();
        let agents = driver.invoked.as_ref().unwrap().lock().unwrap(); // nobody can run a cycle
        let started = std::time::Instant::now();
        let answer =
            driver.request(|reply| DriverCommand::AddSubscription { channel: "aeron:ipc".into(), stream_id: 1, reply });
        assert!(matches!(answer, Err(Error::Timeout(_))), "{:?}", answer.err());
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(agents);
    }
}
