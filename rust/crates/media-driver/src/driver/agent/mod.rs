//! The media driver's agents over shared memory, and the launch type embedders use.
//!
//! * the [`conductor`] ([`conductor::DriverConductor`], its per-client quotas and turns in
//!   `conductor/clients.rs`): client commands, counters,
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

pub mod conductor;
pub mod mmsg;
pub mod receiver;
pub mod sender;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::clock::DutyClock;
use super::cpu;
use super::idle::{IdleStrategy, Idler};
use crate::driver::context::CpuAffinity;
use crate::driver::DriverContext;
use crate::protocol::{Image, NetworkPublication};
use crate::shm::command::Response;
use crate::shm::counters::Counter;
use crate::shm::log_buffer::LogBuffer;
use crate::shm::log_buffer::Unsent;
use crate::shm::wake::{DataWake, ParkWake};
use crate::shm::ShmError;
use conductor::DriverConductor;
use receiver::{ImageDefaults, ReceiverAgent};
use sender::SenderAgent;

pub use crate::driver::context::Threading;

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
    /// Its per-stream counters (written by the sender).
    pub counters: PublicationStreamCounters,
}

/// The per-stream counters of a network publication in the counters file; the sender agent is
/// the one writer of each.
#[derive(Clone, Debug)]
pub struct PublicationStreamCounters {
    /// Publisher limit (`pub-lmt`): how far clients may append.
    pub publisher_limit: Counter,
    /// Sender position (`snd-pos`).
    pub sender_position: Counter,
    /// Publisher position (`pub-pos`), the log's tail.
    pub publisher_position: Counter,
    /// Sender limit (`snd-lmt`): how far flow control lets the sender send.
    pub sender_limit: Counter,
    /// Receivers flow control currently tracks (`fc-receivers`; 0 for `unicast` and `max`).
    pub flow_control_receivers: Counter,
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
    /// The image's own counters (written by the receiver).
    pub counters: ImageCounters,
}

/// The counters of a network image in the counters file; the receiver agent is the one writer
/// of each (the subscribers write their own `sub-pos` counters).
#[derive(Clone, Debug)]
pub struct ImageCounters {
    /// Receiver position (`rcv-pos`): everything before it has arrived, in order.
    pub receiver_position: Counter,
    /// Receiver high-water mark (`rcv-hwm`): the end of the furthest frame received.
    pub receiver_hwm: Counter,
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
    /// A claim no client committed was padded over (the message says where): counted in
    /// "Unblocked publications" and recorded in the error log.
    ClaimUnblocked(String),
    /// A network publication's connected flag changed: the conductor writes it to the log after
    /// broadcasting the events queued before it, so a client that sees the flag change finds
    /// the `connection_changed` / `receiver_removed` events already in its broadcast.
    SetConnected {
        /// The publication's log (shares the mapping).
        log: crate::shm::log_buffer::LogBuffer,
        /// The new value.
        connected: bool,
    },
}

/// The error-log line for a claim padded over at `position` of a publication's log, `bytes` long
/// (network publications' by the sender, IPC publications' by the conductor).
pub fn unblocked_message(channel: &str, session_id: i32, stream_id: i32, position: i64, bytes: u64) -> String {
    format!(
        "{channel} (session {session_id}, stream {stream_id}): a claim at position {position} that no client \
         committed was padded over ({bytes} bytes lost: its client died while appending)"
    )
}

/// How long [`MediaDriver::close`] keeps serving publications so subscribers get their data
/// and the end of stream.
pub const CLOSE_DRAIN: Duration = Duration::from_secs(2);

/// The three agents on one thread (invoker and shared modes), one clock reading per cycle.
struct Agents {
    conductor: DriverConductor,
    sender: SenderAgent,
    receiver: ReceiverAgent,
    clock: DutyClock,
}

impl Agents {
    fn do_work(&mut self) -> usize {
        let time = self.clock.tick();
        self.conductor.do_work_at(time) + self.sender.do_work_at(time.now) + self.receiver.do_work_at(time.now)
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
    /// Threaded modes: what the sending thread parks on besides its sockets.
    wake: Option<Arc<ParkWake>>,
    /// Threaded modes: woken by the receiver after it received data.
    data_wake: Option<Arc<DataWake>>,
}

/// What a thread hands back when it stops.
enum AgentPart {
    Conductor(Box<DriverConductor>),
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

/// Runs `work` on `agent` until `stop`, idling by `idle` after cycles without work; a park
/// also ends when one of the sockets `readable` lists (the sender's and receiver's) has a
/// datagram ([`Idler::idle_or_readable`]), and for the thread that sends, when a client in this
/// process offers (`wake`).
fn run_until<A>(
    (stop, idle, wake): (&AtomicBool, IdleStrategy, Option<Arc<ParkWake>>),
    agent: &mut A,
    mut work: impl FnMut(&mut A) -> usize,
    mut readable: impl FnMut(&A, &mut Vec<std::os::fd::RawFd>),
) {
    let mut idler = Idler::new(idle).with_wake(wake);
    while !stop.load(Ordering::Acquire) {
        let count = work(agent);
        idler.idle_or_readable(count, |fds| readable(agent, fds));
    }
}

/// A thread without sockets (the conductor): it parks on none.
fn no_sockets<A>(_: &A, _: &mut Vec<std::os::fd::RawFd>) {}

fn spawn(name: &str, body: impl FnOnce() -> AgentPart + Send + 'static) -> Result<JoinHandle<AgentPart>, ShmError> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(body)
        .map_err(|e| ShmError::Parameter(format!("cannot start the {name} thread: {e}")))
}

impl MediaDriver {
    /// Checks the settings ([`DriverContext::validate`]), takes the directory (refusing a live
    /// driver, taking over a stale one), creates the cnc, and starts the agents in
    /// `config.threading`.
    pub fn launch(config: DriverContext) -> Result<MediaDriver, ShmError> {
        config.validate().map_err(|e| ShmError::Parameter(e.to_string()))?;
        let (to_sender, sender_commands) = std::sync::mpsc::channel();
        let (to_receiver, receiver_commands) = std::sync::mpsc::channel();
        let (to_conductor, events) = std::sync::mpsc::channel();
        let conductor = DriverConductor::launch_with_agents(config.clone(), to_sender, to_receiver, events)?;
        let batch = config.datagrams_per_cycle.max(1);
        let offload = config.udp_offload;
        let sender =
            SenderAgent::new(sender_commands, to_conductor.clone(), conductor.sender_counters(), batch, offload);
        let mut receiver =
            ReceiverAgent::new(receiver_commands, to_conductor, conductor.receiver_counters(), batch, offload);
        let dir = conductor.dir().to_path_buf();
        let took_over = conductor.took_over().map(str::to_owned);
        let stop = Arc::new(AtomicBool::new(false));
        let mut driver = MediaDriver {
            agents: None,
            threads: Vec::new(),
            stop: stop.clone(),
            dir,
            took_over,
            wake: None,
            data_wake: None,
        };
        let idle = config.idle;
        // The thread that sends parks on a wake-up its in-process clients write after an offer;
        // the receiver wakes in-process client threads waiting for data.
        if config.threading != Threading::Invoker {
            let new = || {
                ParkWake::new()
                    .map(Arc::new)
                    .map_err(|e| ShmError::Parameter(format!("cannot create the driver's wake-up: {e}")))
            };
            driver.wake = Some(new()?);
            driver.data_wake = Some(Arc::new(DataWake::new()));
            receiver.set_data_wake(driver.data_wake.clone());
        }
        let mut agents = Agents { conductor, sender, receiver, clock: DutyClock::new() };
        let wake = driver.wake.clone();
        let affinity = config.cpu_affinity;
        let [conductor_setting, sender_setting, receiver_setting] = CpuAffinity::NAMES;
        let conductor_cpu = (conductor_setting, affinity.conductor);
        let sender_cpu = (sender_setting, affinity.sender);
        match config.threading {
            Threading::Invoker => driver.agents = Some(agents),
            Threading::Shared => {
                let stop = stop.clone();
                driver.start("affinity-driver", conductor_cpu, move || {
                    run_until((&stop, idle, wake), &mut agents, Agents::do_work, |a, fds| {
                        a.sender.readable_fds(fds);
                        a.receiver.readable_fds(fds);
                    });
                    AgentPart::All(Box::new(agents))
                })?;
            }
            Threading::SharedNetwork => {
                let Agents { mut conductor, sender, receiver, .. } = agents;
                let stop_conductor = stop.clone();
                driver.start("affinity-conductor", conductor_cpu, move || {
                    run_until((&stop_conductor, idle, None), &mut conductor, DriverConductor::do_work, no_sockets);
                    AgentPart::Conductor(Box::new(conductor))
                })?;
                let stop_network = stop.clone();
                driver.start("affinity-network", sender_cpu, move || {
                    let mut network = (sender, receiver, DutyClock::new());
                    run_until(
                        (&stop_network, idle, wake),
                        &mut network,
                        |(sender, receiver, clock)| {
                            let now = clock.tick().now;
                            sender.do_work_at(now) + receiver.do_work_at(now)
                        },
                        |(sender, receiver, _), fds| {
                            sender.readable_fds(fds);
                            receiver.readable_fds(fds);
                        },
                    );
                    let (sender, receiver, _) = network;
                    AgentPart::Network(Box::new(sender), Box::new(receiver))
                })?;
            }
            Threading::Dedicated => {
                let Agents { mut conductor, mut sender, mut receiver, .. } = agents;
                let stop_conductor = stop.clone();
                driver.start("affinity-conductor", conductor_cpu, move || {
                    run_until((&stop_conductor, idle, None), &mut conductor, DriverConductor::do_work, no_sockets);
                    AgentPart::Conductor(Box::new(conductor))
                })?;
                let stop_sender = stop.clone();
                driver.start("affinity-sender", sender_cpu, move || {
                    run_until((&stop_sender, idle, wake), &mut sender, SenderAgent::do_work, SenderAgent::readable_fds);
                    AgentPart::Sender(Box::new(sender))
                })?;
                let stop_receiver = stop.clone();
                driver.start("affinity-receiver", (receiver_setting, affinity.receiver), move || {
                    run_until(
                        (&stop_receiver, idle, None),
                        &mut receiver,
                        ReceiverAgent::do_work,
                        ReceiverAgent::readable_fds,
                    );
                    AgentPart::Receiver(Box::new(receiver))
                })?;
            }
        }
        Ok(driver)
    }

    /// Starts the driver thread `name` (kept, so a failed launch stops it) and pins it to `cpu`
    /// when `setting` names one.
    fn start(
        &mut self,
        name: &str,
        (setting, cpu): (&str, Option<usize>),
        body: impl FnOnce() -> AgentPart + Send + 'static,
    ) -> Result<(), ShmError> {
        let thread = spawn(name, body)?;
        let pinned = cpu.map_or(Ok(()), |cpu| cpu::pin(&thread, cpu));
        self.threads.push(thread);
        pinned.map_err(|e| {
            ShmError::Parameter(format!("{setting}={}: cannot pin the {name} thread: {e}", cpu.unwrap_or_default()))
        })
    }

    /// Threaded modes: the wake-up a client in this process calls after each offer, so the
    /// sending thread does not sleep out its park ([`ParkWake`]); `None` in invoker mode.
    pub fn wake(&self) -> Option<Arc<ParkWake>> {
        self.wake.clone()
    }

    /// Threaded modes: the wake-up the receiver wakes after each cycle that received data, what
    /// a client thread in this process parks on while it waits for data; `None` in invoker mode.
    pub fn data_wake(&self) -> Option<Arc<DataWake>> {
        self.data_wake.clone()
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
    /// subscribers) and serves those with a live receiver for at most [`CLOSE_DRAIN`], then ends
    /// the IPC publications and removes the driver's files.
    pub fn close(self) -> Result<(), ShmError> {
        self.close_within(CLOSE_DRAIN).map(drop)
    }

    /// [`MediaDriver::close`] serving publications for at most `drain`; returns what its network
    /// publications had not sent when the drain ended (that data is dropped).
    pub fn close_within(mut self, drain: Duration) -> Result<Unsent, ShmError> {
        self.stop.store(true, Ordering::Release);
        let (mut conductor, mut sender, mut receiver) = (None, None, None);
        if let Some(agents) = self.agents.take() {
            (conductor, sender, receiver) = (Some(agents.conductor), Some(agents.sender), Some(agents.receiver));
        }
        let mut panicked = false;
        for thread in self.threads.drain(..) {
            match thread.join() {
                Ok(AgentPart::All(agents)) => {
                    let Agents { conductor: c, sender: s, receiver: r, .. } = *agents;
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
        let mut agents = Agents { conductor, sender, receiver, clock: DutyClock::new() };
        agents.sender.close_all();
        agents.receiver.close_all();
        let started = std::time::Instant::now();
        while agents.sender.has_receivers_to_drain() && started.elapsed() < drain {
            if agents.do_work() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let unsent = agents.sender.unsent();
        agents.conductor.shutdown()?;
        Ok(unsent)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logbuffer::Offer;
    use crate::media::ports::free_udp_port;
    use crate::shm::broadcast::Received;
    use crate::shm::cnc::{Cnc, CNC_FILE};
    use crate::shm::command::{Command, Response};
    use crate::shm::status::{ImageInfo, PublicationInfo, SystemCounter};
    use crate::shm::test_support::{tempdir, SILENT_CLIENT_TIMEOUT};

    /// An invoker-mode driver with 64 KiB terms in `dir` whose silent clients never time out, and
    /// its `cnc` file opened as a client.
    fn invoker_driver(dir: &std::path::Path) -> (MediaDriver, Cnc) {
        let mut config = DriverContext::new(dir.to_path_buf());
        config.threading = Threading::Invoker;
        config.term_length = 64 * 1024;
        config.client_timeout = SILENT_CLIENT_TIMEOUT;
        let driver = MediaDriver::launch(config).unwrap();
        (driver, Cnc::open(&dir.join(CNC_FILE), true).unwrap())
    }

    #[test]
    fn shutdown_waits_only_for_publications_that_have_a_receiver() {
        let dir = tempdir();
        let (mut driver, cnc) = invoker_driver(&dir);
        let ring = cnc.to_driver().unwrap();
        // Client 1: the driver serves client ids it handed out.
        ring.next_correlation_id().unwrap();
        let send = |command: Command| {
            let (id, bytes) = command.encode();
            ring.write(id, &bytes).unwrap();
        };
        let nobody = format!("aeron:udp?endpoint=127.0.0.1:{}", free_udp_port().unwrap());
        send(Command::AddPublication {
            client_id: 1,
            correlation_id: 11,
            stream_id: 5,
            channel: nobody,
            exclusive: false,
        });
        fn sender(driver: &MediaDriver) -> &SenderAgent {
            &driver.agents.as_ref().unwrap().sender
        }
        for _ in 0..20 {
            driver.do_work();
        }
        assert!(sender(&driver).has_publications(), "the publication reached the sender");
        assert!(!sender(&driver).has_receivers_to_drain(), "nobody receives it");
        let listened = format!("aeron:udp?endpoint=127.0.0.1:{}", free_udp_port().unwrap());
        send(Command::AddSubscription { client_id: 1, correlation_id: 12, stream_id: 6, channel: listened.clone() });
        send(Command::AddPublication {
            client_id: 1,
            correlation_id: 13,
            stream_id: 6,
            channel: listened,
            exclusive: false,
        });
        let start = std::time::Instant::now();
        while !sender(&driver).has_receivers_to_drain() {
            assert!(start.elapsed() < Duration::from_secs(10), "the subscribed publication never had a receiver");
            driver.do_work();
        }
        driver.close().unwrap();
        assert!(!dir.join(CNC_FILE).exists(), "closed: files removed");
    }

    /// A client speaking the shm protocol by hand against an invoker-mode driver.
    #[test]
    fn an_invoker_driver_carries_udp_answers_status_queries_and_cleans_up_on_close() {
        let dir = tempdir();
        let (mut driver, cnc) = invoker_driver(&dir);
        let ring = cnc.to_driver().unwrap();
        // Client 1: the driver serves client ids it handed out.
        ring.next_correlation_id().unwrap();
        let mut broadcast = cnc.to_clients_receiver().unwrap();
        let counters = cnc.counters().unwrap();
        let send = |command: Command| {
            let (id, bytes) = command.encode();
            ring.write(id, &bytes).unwrap();
        };
        let mut scratch = Vec::new();
        let mut answers = Vec::new();
        let mut run = |driver: &mut MediaDriver, answers: &mut Vec<Response>| {
            for _ in 0..20 {
                driver.do_work();
                while let Received::Message(id) = broadcast.receive(&mut scratch).unwrap() {
                    answers.push(Response::decode(id, &scratch).unwrap());
                }
            }
        };
        let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_udp_port().unwrap());
        send(Command::AddSubscription { client_id: 1, correlation_id: 10, stream_id: 5, channel: channel.clone() });
        send(Command::AddSubscription { client_id: 1, correlation_id: 12, stream_id: 5, channel: channel.clone() });
        send(Command::AddPublication {
            client_id: 1,
            correlation_id: 11,
            stream_id: 5,
            channel: channel.clone(),
            exclusive: false,
        });
        run(&mut driver, &mut answers);
        let Some(Response::PublicationReady { publisher_limit_counter_id, log_file, .. }) =
            answers.iter().find(|a| matches!(a, Response::PublicationReady { .. })).cloned()
        else {
            panic!("{answers:?}")
        };
        let images = |answers: &Vec<Response>| {
            answers
                .iter()
                .filter_map(|a| match a {
                    Response::AvailableImage { correlation_id, subscription_registration_id, .. } => {
                        Some((*subscription_registration_id, *correlation_id))
                    }
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let start = std::time::Instant::now();
        while images(&answers).len() < 2 {
            assert!(start.elapsed() < Duration::from_secs(10), "no image: {answers:?}");
            run(&mut driver, &mut answers);
        }
        let links = images(&answers);
        assert_eq!(links.len(), 2, "one image, announced to each subscription: {links:?}");
        assert_ne!(links[0].1, links[1].1, "each subscription knows the image by its own correlation id");
        let image_of = |subscription: i64| {
            answers
                .iter()
                .find_map(|a| match a {
                    Response::AvailableImage {
                        subscription_registration_id,
                        log_file,
                        subscriber_position_counter_id,
                        source_identity,
                        ..
                    } if *subscription_registration_id == subscription => {
                        Some((log_file.clone(), *subscriber_position_counter_id, source_identity.clone()))
                    }
                    _ => None,
                })
                .unwrap()
        };
        let (image_file, subscriber_position_counter_id, source_identity) = image_of(10);
        let (other_file, other_position_id, _) = image_of(12);
        assert_eq!(image_file, other_file, "one image log for both subscriptions");
        let other_position = counters.counter(other_position_id as usize).unwrap();
        assert!(source_identity.starts_with("127.0.0.1:"), "{source_identity}");
        let publication = LogBuffer::open(&dir.join(&log_file)).unwrap();
        let image = LogBuffer::open(&dir.join(&image_file)).unwrap();
        let limit = counters.counter(publisher_limit_counter_id as usize).unwrap();
        let position = counters.counter(subscriber_position_counter_id as usize).unwrap();
        let (mut sent, mut received, mut read_position) = (0u32, Vec::new(), position.get().unwrap());
        let mut read_scratch = Vec::new();
        let start = std::time::Instant::now();
        while received.len() < 5_000 {
            assert!(start.elapsed() < Duration::from_secs(30), "stalled at {} received", received.len());
            while sent < 5_000 {
                match publication.offer(&sent.to_le_bytes(), 0, limit.get().unwrap()).unwrap() {
                    Offer::Appended(_) => sent += 1,
                    _ => break,
                }
            }
            driver.do_work();
            read_position = image
                .read(read_position, 1000, &mut read_scratch, |_, payload| {
                    received.push(u32::from_le_bytes(payload[..4].try_into().unwrap()))
                })
                .unwrap();
            position.set(read_position).unwrap();
            // The second subscription reads nothing here, it only keeps up.
            other_position.set(read_position).unwrap();
        }
        assert_eq!(received, (0..5_000).collect::<Vec<u32>>());
        send(Command::QueryPublication { client_id: 1, correlation_id: 20, registration_id: 11 });
        send(Command::QuerySubscription { client_id: 1, correlation_id: 21, registration_id: 10 });
        send(Command::QueryPublication { client_id: 1, correlation_id: 22, registration_id: 999 });
        run(&mut driver, &mut answers);
        let status = answers.iter().find_map(|a| match a {
            Response::PublicationStatus { correlation_id: 20, json } => Some(json.clone()),
            _ => None,
        });
        let status: PublicationInfo = serde_json::from_str(&status.expect("publication status")).unwrap();
        assert!(status.connected && status.position >= 5_000 * 32 && status.live_receivers.len() == 1, "{status:?}");
        let images = answers.iter().find_map(|a| match a {
            Response::SubscriptionStatus { correlation_id: 21, json } => Some(json.clone()),
            _ => None,
        });
        let images: Vec<ImageInfo> = serde_json::from_str(&images.expect("subscription status")).unwrap();
        assert_eq!(images.len(), 1);
        assert_eq!(images[0].position, read_position);
        assert!(answers.iter().any(|a| matches!(a, Response::Error { correlation_id: 22, .. })));
        let connected = answers.iter().any(|a| match a {
            Response::DriverEvent { publication_registration_id: 11, json } => {
                let event: crate::shm::status::DriverEventInfo = serde_json::from_str(json).unwrap();
                event.kind == crate::shm::status::DriverEventKindInfo::ConnectionChanged { connected: true }
            }
            _ => false,
        });
        assert!(connected, "no connection_changed event: {answers:?}");
        assert_eq!(SystemCounter::NetworkPublications.read(&counters).unwrap(), 1);
        assert_eq!(SystemCounter::Images.read(&counters).unwrap(), 1);
        // The publisher releases its publication: end of stream, and each subscription hears
        // that its image is gone under the id it knows it by.
        send(Command::RemovePublication { client_id: 1, correlation_id: 30, registration_id: 11 });
        let start = std::time::Instant::now();
        let gone = |answers: &Vec<Response>| {
            answers
                .iter()
                .filter_map(|a| match a {
                    Response::UnavailableImage { correlation_id, subscription_registration_id, .. } => {
                        Some((*subscription_registration_id, *correlation_id))
                    }
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        while gone(&answers).len() < 2 {
            assert!(start.elapsed() < Duration::from_secs(20), "images not unavailable: {answers:?}");
            run(&mut driver, &mut answers);
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut gone = gone(&answers);
        gone.sort();
        let mut links = links;
        links.sort();
        assert_eq!(gone, links);
        driver.close().unwrap();
        assert!(!dir.join(CNC_FILE).exists(), "close removes the driver's files");
    }

    #[test]
    fn threading_names_parse_and_bad_ones_are_named() {
        assert_eq!("dedicated".parse::<Threading>(), Ok(Threading::Dedicated));
        assert_eq!("shared-network".parse::<Threading>(), Ok(Threading::SharedNetwork));
        assert_eq!("invoker".parse::<Threading>(), Ok(Threading::Invoker));
        assert_eq!(
            "many".parse::<Threading>(),
            Err("expected one of shared, shared-network, dedicated, invoker".into())
        );
    }

    #[test]
    fn a_threaded_driver_closes_and_removes_its_files() {
        for threading in [Threading::Dedicated, Threading::SharedNetwork, Threading::Shared] {
            let dir = tempdir();
            let config = DriverContext { threading, ..DriverContext::new(dir.to_path_buf()) };
            let driver = MediaDriver::launch(config).unwrap();
            assert!(dir.join(CNC_FILE).exists());
            driver.close().unwrap();
            assert!(!dir.join(CNC_FILE).exists(), "{threading:?}");
        }
    }

    /// The CPUs each thread of this process named `affinity-*` may run on, by name
    /// (`Cpus_allowed_list` of `/proc/self/task/<tid>/status`): one entry per thread, since
    /// other tests of this process may run drivers of their own meanwhile.
    #[cfg(target_os = "linux")]
    fn driver_thread_cpus() -> std::collections::BTreeMap<String, Vec<String>> {
        let mut cpus: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let Ok(status) = std::fs::read_to_string(task.path().join("status")) else { continue };
            let field =
                |key: &str| status.lines().find_map(|line| line.strip_prefix(key)).map(|value| value.trim().to_owned());
            if let (Some(name), Some(allowed)) = (field("Name:"), field("Cpus_allowed_list:")) {
                if name.starts_with("affinity-") {
                    cpus.entry(name).or_default().push(allowed);
                }
            }
        }
        cpus
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn each_driver_thread_runs_on_the_cpu_its_setting_names() {
        let allowed = cpu::allowed().unwrap();
        if allowed.len() < 2 {
            eprintln!("skipped: this process may run on one CPU only, where a pinned thread looks unpinned");
            return;
        }
        let (first, last) = (allowed[0], *allowed.last().unwrap());
        let dir = tempdir();
        let mut config = DriverContext { threading: Threading::Dedicated, ..DriverContext::new(dir.to_path_buf()) };
        config.apply("sender_cpu_affinity", &first.to_string()).unwrap();
        config.apply("receiver_cpu_affinity", &last.to_string()).unwrap();
        let driver = MediaDriver::launch(config).unwrap();
        // A thread names itself once it runs: wait (bounded) until this driver's pinned threads
        // show under their names.
        let alone = |cpus: &std::collections::BTreeMap<String, Vec<String>>, name: &str| -> Vec<String> {
            cpus.get(name).into_iter().flatten().filter(|list| list.parse::<usize>().is_ok()).cloned().collect()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut cpus = driver_thread_cpus();
        while (alone(&cpus, "affinity-sender").is_empty() || alone(&cpus, "affinity-receiv").is_empty())
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
            cpus = driver_thread_cpus();
        }
        driver.close().unwrap();
        // Other tests of this process run unpinned drivers meanwhile and none pins a thread, so
        // a thread allowed one CPU only is this driver's. `comm` keeps 15 bytes of a name.
        let alone_on = |name: &str| alone(&cpus, name);
        assert_eq!(alone_on("affinity-sender"), [first.to_string()], "{cpus:?}");
        assert_eq!(alone_on("affinity-receiv"), [last.to_string()], "{cpus:?}");
        assert!(alone_on("affinity-conduc").is_empty(), "an unset setting leaves its thread alone: {cpus:?}");
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_cpu_setting_no_thread_of_the_mode_takes_or_a_cpu_out_of_reach_is_refused_before_launch() {
        let refused = |threading: Threading, setting: &str, value: &str| {
            let dir = tempdir();
            let mut config = DriverContext { threading, ..DriverContext::new(dir.to_path_buf()) };
            config.apply(setting, value).unwrap();
            let error = MediaDriver::launch(config).unwrap_err().to_string();
            assert!(!dir.join(CNC_FILE).exists(), "a refused launch created the cnc ({error})");
            error
        };
        let cpu = cpu::allowed().unwrap()[0].to_string();
        assert!(refused(Threading::Shared, "receiver_cpu_affinity", &cpu)
            .contains("threading shared runs every agent on one thread: set conductor_cpu_affinity"),);
        assert!(refused(Threading::SharedNetwork, "receiver_cpu_affinity", &cpu)
            .contains("threading shared-network runs the receiver on the sender's thread"));
        assert!(refused(Threading::Invoker, "conductor_cpu_affinity", &cpu)
            .contains("threading invoker starts no driver thread"));
        let outside = (0..=cpu::MAX_CPU).find(|c| !cpu::allowed().unwrap().contains(c)).unwrap();
        let error = refused(Threading::Dedicated, "sender_cpu_affinity", &outside.to_string());
        assert!(error.contains(&format!("sender_cpu_affinity={outside}: this process may run on CPUs ")), "{error}");
    }
}
