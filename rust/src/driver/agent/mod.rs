//! The media driver's agents over shared memory, and the launch type embedders use.
//!
//! * the conductor ([`crate::driver::standalone::StandaloneDriver`]): client commands, counters,
//!   client liveness, IPC publications, the life of network publications and images, events;
//! * the [`sender`]: network publications (data, retransmits, heartbeats, SETUP out; status
//!   messages, NAKs, RTT requests and error frames in);
//! * the [`receiver`]: data, SETUP and heartbeats in, status messages and NAKs out, image logs.
//!
//! The agents talk through message queues ([`SenderCommand`], [`ReceiverCommand`] from the
//! conductor, [`AgentEvent`] back to it), never through a lock an application thread takes:
//! applications touch only the shared-memory logs and counters. [`MediaDriver`] runs them in
//! the chosen [`Threading`]: three threads, conductor + network thread, one thread, or none
//! (the embedder calls [`MediaDriver::do_work`]).
//!
//! Nothing here imports `client/`.

pub mod receiver;
pub mod sender;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::idle::{IdleStrategy, Idler};
use super::standalone::{StandaloneConfig, StandaloneDriver};
use crate::protocol::{Image, NetworkPublication};
use crate::shm::command::Response;
use crate::shm::counters::Counter;
use crate::shm::log_buffer::LogBuffer;
use crate::shm::ShmError;
use receiver::{ImageDefaults, ReceiverAgent};
use sender::SenderAgent;

/// How the agents get CPU time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threading {
    /// Conductor, sender and receiver on three threads.
    Dedicated,
    /// The conductor on one thread, sender and receiver on another.
    SharedNetwork,
    /// One thread runs the three agents in turn (the default: right on 2 cores).
    Shared,
    /// No thread: the embedder calls [`MediaDriver::do_work`].
    Invoker,
}

impl std::str::FromStr for Threading {
    type Err = String;
    fn from_str(value: &str) -> Result<Self, String> {
        match value {
            "dedicated" => Ok(Threading::Dedicated),
            "shared-network" => Ok(Threading::SharedNetwork),
            "shared" => Ok(Threading::Shared),
            "invoker" => Ok(Threading::Invoker),
            other => Err(format!("{other:?}: expected dedicated, shared-network, shared or invoker")),
        }
    }
}

/// A new network publication, created by the conductor, served by the sender.
pub struct NewPublication {
    /// Registration id (the creating command's correlation id).
    pub registration_id: i64,
    /// The channel URI as given.
    pub channel: String,
    /// The protocol state machine over the shared log.
    pub publication: NetworkPublication<LogBuffer>,
    /// Data goes out of here; unicast control frames come back here.
    pub socket: UdpSocket,
    /// Where data goes (endpoint or multicast group).
    pub destination: SocketAddr,
    /// Multicast: the socket joined to the control group.
    pub control_socket: Option<UdpSocket>,
    /// Publisher limit (written by the sender).
    pub publisher_limit: Counter,
    /// Sender position (written by the sender).
    pub sender_position: Counter,
    /// Publisher position, the log's tail (written by the sender).
    pub publisher_position: Counter,
}

/// A new receive endpoint (a bound socket), created by the conductor.
pub struct NewEndpoint {
    /// The bound socket.
    pub socket: UdpSocket,
    /// The channel's endpoint address (the key subscriptions name it by).
    pub address: SocketAddr,
    /// Multicast: status messages go to the control group instead of the data source.
    pub control_override: Option<SocketAddr>,
    /// This endpoint's receiver id in status messages.
    pub receiver_id: i64,
    /// Settings of the images it creates.
    pub defaults: ImageDefaults,
}

/// A new image, created by the conductor (log file, counters) on the receiver's request.
pub struct NewImage {
    /// The endpoint that asked for it.
    pub endpoint: SocketAddr,
    /// The image's correlation id.
    pub correlation_id: i64,
    /// The protocol state machine over the shared image log (consumers added).
    pub image: Image<LogBuffer>,
    /// Where its data came from (status messages go back there unless multicast).
    pub source: SocketAddr,
    /// Each consuming subscription's registration id and position counter.
    pub consumers: Vec<(i64, Counter)>,
}

/// Conductor → sender.
pub enum SenderCommand {
    /// Serve a new publication.
    Add(Box<NewPublication>),
    /// Every client released the publication: drain, signal end of stream, linger.
    Close {
        /// Registration id.
        registration_id: i64,
    },
    /// Answer [`crate::shm::command::Command::QueryPublication`].
    Query {
        /// Registration id.
        registration_id: i64,
        /// The query's correlation id.
        correlation_id: i64,
    },
    /// Shutting down: close every publication.
    CloseAll,
}

/// Conductor → receiver.
pub enum ReceiverCommand {
    /// Bind a new endpoint.
    AddEndpoint(Box<NewEndpoint>),
    /// A subscription on an endpoint.
    AddSubscription {
        /// The endpoint's address.
        endpoint: SocketAddr,
        /// Registration id.
        registration_id: i64,
        /// Stream id.
        stream_id: i32,
        /// `session-id=` filter.
        session_filter: Option<i32>,
    },
    /// A subscription went away (its images lose that consumer; an endpoint without
    /// subscriptions and images is closed).
    RemoveSubscription {
        /// Registration id.
        registration_id: i64,
    },
    /// An image the receiver asked for.
    AddImage(Box<NewImage>),
    /// The image could not be created (its session may ask again later).
    ImageRefused {
        /// The endpoint that asked.
        endpoint: SocketAddr,
        /// Session id.
        session_id: i32,
        /// Stream id.
        stream_id: i32,
    },
    /// Answer [`crate::shm::command::Command::QuerySubscription`].
    Query {
        /// Registration id.
        registration_id: i64,
        /// The query's correlation id.
        correlation_id: i64,
    },
    /// Shutting down: every image ends.
    CloseAll,
}

/// What a SETUP asks the conductor to create.
pub struct ImageRequest {
    /// The endpoint.
    pub endpoint: SocketAddr,
    /// The image's settings (validated SETUP).
    pub config: crate::protocol::ImageConfig,
    /// The SETUP's MTU (the image log's).
    pub mtu: u32,
    /// The sender's address.
    pub source: SocketAddr,
    /// Matching subscriptions (below their image limit).
    pub subscriptions: Vec<i64>,
}

/// Sender or receiver → conductor.
pub enum AgentEvent {
    /// Broadcast this to the clients (status answers, driver events).
    Respond(Response),
    /// A publication finished (drained, lingered): free its counters and log.
    PublicationDone {
        /// Registration id.
        registration_id: i64,
    },
    /// A SETUP for a new session: create its image.
    CreateImage(Box<ImageRequest>),
    /// An image ended (end of stream, timeout, no consumer left).
    ImageClosed {
        /// The image's correlation id.
        correlation_id: i64,
        /// Whether it ended with data missing.
        incomplete: bool,
    },
    /// An error to record in the driver's error log.
    Error(String),
}

/// Settings of a [`MediaDriver`].
#[derive(Clone, Debug)]
pub struct MediaDriverConfig {
    /// Directory, cnc sizes, timeouts, IPC and network defaults.
    pub standalone: StandaloneConfig,
    /// Threads.
    pub threading: Threading,
    /// What an agent thread does when idle.
    pub idle: IdleStrategy,
}

impl MediaDriverConfig {
    /// Defaults for `dir`: shared threading, backoff idle.
    pub fn new(dir: std::path::PathBuf) -> Self {
        MediaDriverConfig {
            standalone: StandaloneConfig::new(dir),
            threading: Threading::Shared,
            idle: IdleStrategy::default(),
        }
    }
}

/// How long [`MediaDriver::close`] keeps serving publications so subscribers get their data
/// and the end of stream.
pub const CLOSE_DRAIN: Duration = Duration::from_secs(2);

struct Agents {
    conductor: StandaloneDriver,
    sender: SenderAgent,
    receiver: ReceiverAgent,
}

impl Agents {
    fn do_work(&mut self) -> usize {
        self.conductor.do_work() + self.sender.do_work() + self.receiver.do_work()
    }
}

/// A running media driver: the conductor over the driver directory plus the sender and
/// receiver agents, in the configured threading mode.
pub struct MediaDriver {
    /// Invoker mode: the agents, run by [`MediaDriver::do_work`]. Threaded modes: `None`
    /// while the threads run.
    agents: Option<Agents>,
    threads: Vec<JoinHandle<AgentPart>>,
    stop: Arc<AtomicBool>,
    dir: std::path::PathBuf,
    took_over: Option<String>,
}

/// What a thread hands back when it stops.
enum AgentPart {
    Conductor(Box<StandaloneDriver>),
    Sender(Box<SenderAgent>),
    Receiver(Box<ReceiverAgent>),
    Network(Box<SenderAgent>, Box<ReceiverAgent>),
    All(Box<Agents>),
}

impl std::fmt::Debug for MediaDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MediaDriver").field("dir", &self.dir).field("threads", &self.threads.len()).finish()
    }
}

/// Runs `work` until `stop`, idling by `idle` after cycles without work.
fn run_until(stop: &AtomicBool, idle: IdleStrategy, mut work: impl FnMut() -> usize) {
    let mut idler = Idler::new(idle);
    while !stop.load(Ordering::Acquire) {
        let count = work();
        idler.idle(count);
    }
}

fn spawn(name: &str, body: impl FnOnce() -> AgentPart + Send + 'static) -> Result<JoinHandle<AgentPart>, ShmError> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(body)
        .map_err(|e| ShmError::Parameter(format!("cannot start the {name} thread: {e}")))
}

impl MediaDriver {
    /// Takes the directory (refusing a live driver, taking over a stale one), creates the cnc,
    /// and starts the agents in `config.threading`.
    pub fn launch(config: MediaDriverConfig) -> Result<MediaDriver, ShmError> {
        config.standalone.context.validate().map_err(|e| ShmError::Parameter(e.to_string()))?;
        let (to_sender, sender_commands) = std::sync::mpsc::channel();
        let (to_receiver, receiver_commands) = std::sync::mpsc::channel();
        let (to_conductor, events) = std::sync::mpsc::channel();
        let conductor =
            StandaloneDriver::launch_with_agents(config.standalone.clone(), to_sender, to_receiver, events)?;
        let batch = config.standalone.context.datagrams_per_cycle.max(1);
        let sender = SenderAgent::new(sender_commands, to_conductor.clone(), conductor.sender_counters(), batch);
        let receiver = ReceiverAgent::new(receiver_commands, to_conductor, conductor.receiver_counters(), batch);
        let dir = conductor.dir().to_path_buf();
        let took_over = conductor.took_over().map(str::to_owned);
        let stop = Arc::new(AtomicBool::new(false));
        let mut driver = MediaDriver { agents: None, threads: Vec::new(), stop: stop.clone(), dir, took_over };
        let idle = config.idle;
        let mut agents = Agents { conductor, sender, receiver };
        match config.threading {
            Threading::Invoker => driver.agents = Some(agents),
            Threading::Shared => {
                let stop = stop.clone();
                driver.threads.push(spawn("affinity-driver", move || {
                    run_until(&stop, idle, || agents.do_work());
                    AgentPart::All(Box::new(agents))
                })?);
            }
            Threading::SharedNetwork => {
                let Agents { mut conductor, mut sender, mut receiver } = agents;
                let stop_conductor = stop.clone();
                driver.threads.push(spawn("affinity-conductor", move || {
                    run_until(&stop_conductor, idle, || conductor.do_work());
                    AgentPart::Conductor(Box::new(conductor))
                })?);
                let stop_network = stop.clone();
                driver.threads.push(spawn("affinity-network", move || {
                    run_until(&stop_network, idle, || sender.do_work() + receiver.do_work());
                    AgentPart::Network(Box::new(sender), Box::new(receiver))
                })?);
            }
            Threading::Dedicated => {
                let Agents { mut conductor, mut sender, mut receiver } = agents;
                let stop_conductor = stop.clone();
                driver.threads.push(spawn("affinity-conductor", move || {
                    run_until(&stop_conductor, idle, || conductor.do_work());
                    AgentPart::Conductor(Box::new(conductor))
                })?);
                let stop_sender = stop.clone();
                driver.threads.push(spawn("affinity-sender", move || {
                    run_until(&stop_sender, idle, || sender.do_work());
                    AgentPart::Sender(Box::new(sender))
                })?);
                let stop_receiver = stop.clone();
                driver.threads.push(spawn("affinity-receiver", move || {
                    run_until(&stop_receiver, idle, || receiver.do_work());
                    AgentPart::Receiver(Box::new(receiver))
                })?);
            }
        }
        Ok(driver)
    }

    /// Why a stale directory was taken over, if it was.
    pub fn took_over(&self) -> Option<&str> {
        self.took_over.as_deref()
    }

    /// The driver directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Invoker mode: one duty cycle of every agent; returns the work done. In threaded modes
    /// the threads do the work and this returns 0.
    pub fn do_work(&mut self) -> usize {
        self.agents.as_mut().map_or(0, Agents::do_work)
    }

    /// Clean shutdown: stops the threads, ends every network publication (end of stream to its
    /// subscribers) and serves them for at most [`CLOSE_DRAIN`], then ends the IPC publications
    /// and removes the driver's files.
    pub fn close(mut self) -> Result<(), ShmError> {
        self.stop.store(true, Ordering::Release);
        let (mut conductor, mut sender, mut receiver) = (None, None, None);
        if let Some(agents) = self.agents.take() {
            (conductor, sender, receiver) = (Some(agents.conductor), Some(agents.sender), Some(agents.receiver));
        }
        let mut panicked = false;
        for thread in self.threads.drain(..) {
            match thread.join() {
                Ok(AgentPart::All(agents)) => {
                    let Agents { conductor: c, sender: s, receiver: r } = *agents;
                    (conductor, sender, receiver) = (Some(c), Some(s), Some(r));
                }
                Ok(AgentPart::Conductor(c)) => conductor = Some(*c),
                Ok(AgentPart::Sender(s)) => sender = Some(*s),
                Ok(AgentPart::Receiver(r)) => receiver = Some(*r),
                Ok(AgentPart::Network(s, r)) => (sender, receiver) = (Some(*s), Some(*r)),
                Err(_) => panicked = true,
            }
        }
        let (Some(conductor), Some(sender), Some(receiver)) = (conductor, sender, receiver) else {
            let _ = crate::shm::directory::remove_driver_files(&self.dir);
            return Err(ShmError::Parameter(format!(
                "a driver thread panicked ({panicked}); {} cleaned up",
                self.dir.display()
            )));
        };
        let mut agents = Agents { conductor, sender, receiver };
        agents.sender.close_all();
        agents.receiver.close_all();
        let started = std::time::Instant::now();
        while agents.sender.has_publications() && started.elapsed() < CLOSE_DRAIN {
            if agents.do_work() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        agents.conductor.shutdown()
    }
}

impl Drop for MediaDriver {
    fn drop(&mut self) {
        // Dropped without close(): stop the threads; the directory stays (a later driver takes
        // it over as stale).
        self.stop.store(true, Ordering::Release);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}
