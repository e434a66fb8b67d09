//! The media driver: conductor, sender and receiver agents, run on a driver thread (shared
//! mode) or by the application (invoker mode).

pub mod conductor;
pub mod context;
pub mod events;
pub mod idle;
pub mod ipc;
pub mod receiver;
pub mod sender;
pub mod standalone;
pub mod transmit;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub use conductor::DriverCommand;
pub use context::{DriverContext, ThreadingMode};
pub use events::{DriverEvent, DriverEventKind, EventLog};
pub use idle::{IdleStrategy, Idler};
pub use receiver::lock;

use crate::error::{Error, Result};
use crate::time::MonotonicClock;
use conductor::Conductor;
use receiver::ReceiverAgent;
use sender::{SenderAgent, SenderCounters};

/// How long a closing driver keeps sending so appended data reaches the receivers.
const SHUTDOWN_DRAIN_LIMIT: Duration = Duration::from_secs(2);

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
    thread: Mutex<Option<JoinHandle<()>>>,
    shutdown: Arc<AtomicBool>,
    events: Arc<Mutex<EventLog>>,
    sender_counters: Arc<SenderCounters>,
    receiver_counters: Arc<receiver::ReceiverCounters>,
}

impl Driver {
    /// Starts a driver with `context` (a thread in shared mode, nothing in invoker mode).
    pub fn start(context: DriverContext) -> Result<Driver> {
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

    /// One duty cycle in invoker mode (0 in shared mode, where the thread does the work).
    pub fn do_work(&self) -> usize {
        match &self.invoked {
            Some(agents) => match agents.try_lock() {
                Ok(mut agents) => agents.do_work(),
                Err(_) => 0,
            },
            None => 0,
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
    pub fn send(&self, command: DriverCommand) {
        let _ = self.commands.send(command);
        self.do_work();
    }

    /// Sends a command and waits for its answer.
    pub fn request<T>(&self, command: impl FnOnce(Sender<Result<T>>) -> DriverCommand) -> Result<T> {
        if self.is_shut_down() {
            return Err(Error::Closed("driver"));
        }
        let (reply, answer) = mpsc::channel();
        self.commands.send(command(reply)).map_err(|_| Error::Closed("driver"))?;
        if self.invoked.is_some() {
            self.do_work();
            return answer.try_recv().map_err(|_| Error::Driver("the driver did not answer".into()))?;
        }
        answer.recv_timeout(self.context.client_command_timeout).map_err(|_| {
            Error::Timeout(format!("no answer from the driver within {:?}", self.context.client_command_timeout))
        })?
    }

    /// Stops the driver after sending what publications still hold (bounded wait).
    pub fn shutdown(&self) {
        if self.shutdown.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(agents) = &self.invoked {
            lock(agents).drain();
        }
        if let Some(thread) = lock(&self.thread).take() {
            thread.thread().unpark();
            let _ = thread.join();
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
