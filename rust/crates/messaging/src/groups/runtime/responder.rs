//! A bootstrap responder that is no member: `affinity driver` and `affinity router` run one with
//! `--bootstrap-listen HOST:PORT` (and `--registry DIR`), so a bootstrap list may name them
//! (`docs/groups.md`, "Across hosts: bootstrap").
//!
//! It listens on one CONTROL-stream inbox at the fixed address and answers BOOTSTRAP for every
//! group defined in the registry (read again every [`REGISTRY_RESCAN`]), with the group's
//! definition (version and fingerprint) and the members it hears: every member given a bootstrap
//! list heartbeats each listed address, so the responder keeps a [`MemberView`] per group from
//! those heartbeats. It reads no member files (they hold loopback inboxes of one host). It
//! lists itself first, as an observer at its address (askers do not wait for it as a peer, and
//! never depend on it once joined: heartbeats, claims and acks go member to member).
//!
//! A group with a secret (`$AFFINITY_GROUP_SECRET`, `$AFFINITY_GROUP_SECRET_FILE` or the
//! registry's `<name>.secret`, as [`registry::load_secret`] finds it for every member) is
//! answered only to an authentic request, through the members' own
//! [`answer_message`]; heartbeats are verified the same way before they count.
//!
//! It runs on its own thread over the client API; the driver (`driver/`) never sees it: the
//! binaries compose the two (`affinity::embedded::run_driver_command`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::bootstrap::{answer_message, bootstrap_auth, control_channel, Answered, Replies};
use super::{CONTROL_FRAGMENTS_PER_ITERATION, IDLE_SLEEP};
use crate::client::{ClientApi, MessageBatch, SubscriptionHandle as Subscription};
use crate::control::bootstrap::{bootstrap_namespace, BootstrapMember};
use crate::control::codec::Kind;
use crate::control::member::{self, new_member_id, parse_address, InboxAddress, DEFAULT_LIVENESS_TIMEOUT};
use crate::control::CONTROL_STREAM_ID;
use crate::control::{parse_control, ControlMessage, GroupSecret, MemberView, Role, StreamAuth};
use crate::error::Error;
use crate::groups::registry;
use crate::groups::{GroupConfig, GroupError};
use crate::sync::lock;
use crate::time::{Instant, MonotonicClock};

/// One command-line option of the responder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponderOption {
    /// The option without its dashes (`bootstrap-listen`).
    pub name: &'static str,
    /// What its value is, for the usage text.
    pub value: &'static str,
    /// One line of help.
    pub help: &'static str,
}

impl ResponderOption {
    /// `--name`.
    pub fn flag(&self) -> String {
        format!("--{}", self.name)
    }
}

/// `--bootstrap-listen HOST:PORT`: where the responder listens (and what it tells askers).
pub const BOOTSTRAP_LISTEN: ResponderOption = ResponderOption {
    name: "bootstrap-listen",
    value: "HOST:PORT",
    help: "answer BOOTSTRAP requests here for the groups of the registry (an address members \
           can reach: a bootstrap list names it)",
};
/// `--registry DIR`: where the definitions (and secrets) of the groups answered for are.
pub const REGISTRY: ResponderOption = ResponderOption {
    name: "registry",
    value: "DIR",
    help: "registry of the groups answered for (default $AFFINITY_REGISTRY, else \
           $XDG_STATE_HOME/affinity, else ~/.local/state/affinity); only with --bootstrap-listen",
};
/// The responder's options, the one list `affinity driver`, `affinity-driver` and
/// `affinity router` take them from.
pub const RESPONDER_OPTIONS: [ResponderOption; 2] = [BOOTSTRAP_LISTEN, REGISTRY];
/// How often the registry is read again (groups created, changed or removed).
pub const REGISTRY_RESCAN: Duration = Duration::from_secs(1);
/// How long a silent member stays in a group's view before it is forgotten (it is not listed
/// once past the liveness timeout already; this bounds the memory).
pub const FORGET_AFTER: Duration = Duration::from_secs(60);
/// Most groups answered for (the groups of the registry in name order beyond it are left out,
/// reported).
pub const MAX_GROUPS: usize = 1024;

/// Where a responder listens and which registry it answers for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponderOptions {
    /// The inbox's address (fixed, reachable: no wildcard, no port 0).
    pub listen: SocketAddr,
    /// The registry directory.
    pub registry: PathBuf,
}

impl ResponderOptions {
    /// Checks `listen` (`host:port`) and resolves the registry (`None`: the default one).
    pub fn new(listen: &str, registry: Option<&str>) -> Result<ResponderOptions, String> {
        let what = BOOTSTRAP_LISTEN.flag();
        let address = parse_address(listen, &what, false).map_err(|e| e.to_string())?;
        if address.port() == 0 {
            return Err(format!("{what} {listen:?}: port 0 cannot be in a bootstrap list; give a fixed port"));
        }
        let registry = registry::registry_dir(registry)?;
        if !registry.is_dir() {
            return Err(format!("{} {}: not a directory", REGISTRY.flag(), registry.display()));
        }
        Ok(ResponderOptions { listen: address, registry })
    }
}

impl ResponderOptions {
    /// The options given as values of [`RESPONDER_OPTIONS`] (`None`: not given), as every
    /// command line takes them: `None` without `--bootstrap-listen`; `--registry` alone is
    /// refused.
    pub fn from_values(listen: Option<&str>, registry: Option<&str>) -> Result<Option<ResponderOptions>, String> {
        match (listen, registry) {
            (Some(listen), registry) => ResponderOptions::new(listen, registry).map(Some),
            (None, Some(_)) => Err(format!("{} needs {}", REGISTRY.flag(), BOOTSTRAP_LISTEN.flag())),
            (None, None) => Ok(None),
        }
    }
}

/// Takes the responder's options out of a command line (`--NAME VALUE` or `--NAME=VALUE`,
/// dashes or underscores, as the driver's options), returning them and the other arguments.
/// `Ok((None, _))` without `--bootstrap-listen`; `--registry` alone is refused.
pub fn take_options(args: &[String]) -> Result<(Option<ResponderOptions>, Vec<String>), String> {
    let mut values: [Option<String>; RESPONDER_OPTIONS.len()] = Default::default();
    let mut rest = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let (option, inline) = match arg.split_once('=') {
            Some((option, value)) => (option, Some(value.to_owned())),
            None => (arg.as_str(), None),
        };
        let name = option.strip_prefix("--").map(|name| name.replace('_', "-"));
        let Some(index) = RESPONDER_OPTIONS.iter().position(|o| Some(o.name) == name.as_deref()) else {
            rest.push(arg.clone());
            continue;
        };
        let value = inline.or_else(|| iter.next().cloned()).ok_or_else(|| format!("{option} needs a value"))?;
        if values[index].replace(value).is_some() {
            return Err(format!("{option} is given twice"));
        }
    }
    let [listen, registry] = values;
    Ok((ResponderOptions::from_values(listen.as_deref(), registry.as_deref())?, rest))
}

/// The usage lines of the responder's options (appended to the driver's usage).
pub fn usage() -> String {
    let mut text = String::from("Bootstrap responder (docs/groups.md):\n");
    for option in RESPONDER_OPTIONS {
        text.push_str(&format!("  {} {}\n      {}\n", option.flag(), option.value, option.help));
    }
    text.pop();
    text
}

/// What a responder did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResponderCounters {
    /// Groups answered for (the last registry read).
    pub groups: u64,
    /// BOOTSTRAP requests answered.
    pub answered: u64,
    /// Heartbeats heard (authentic, of a group answered for).
    pub heartbeats: u64,
    /// Messages about a group the registry does not define (or not yet).
    pub unknown_group: u64,
    /// Authentic messages that did not decode.
    pub malformed: u64,
    /// Messages refused by authentication (dropped before decoding).
    pub auth_refused: u64,
    /// Answers dropped because too many were in flight.
    pub dropped: u64,
}

/// One group answered for.
struct Served {
    config: GroupConfig,
    secret: Option<GroupSecret>,
    bootstrap_auth: StreamAuth,
    control_auth: StreamAuth,
    view: MemberView,
}

impl Served {
    fn new(config: GroupConfig, secret: Option<GroupSecret>, own_id: u64) -> Served {
        Served {
            bootstrap_auth: bootstrap_auth(secret.as_ref(), &config.name),
            control_auth: StreamAuth::new(secret.as_ref(), config.fingerprint(), CONTROL_STREAM_ID),
            view: MemberView::new(own_id, config.fingerprint(), DEFAULT_LIVENESS_TIMEOUT),
            config,
            secret,
        }
    }
}

/// The responder's state, owned by its thread.
struct State {
    client: Arc<dyn ClientApi>,
    registry: PathBuf,
    own: BootstrapMember,
    subscription: Subscription,
    groups: Vec<Served>,
    by_namespace: HashMap<u64, usize>,
    by_fingerprint: HashMap<u64, usize>,
    /// Problems already reported (each once while it lasts).
    reported: Vec<String>,
    replies: Replies,
    batch: MessageBatch,
    counters: ResponderCounters,
    /// Authentication refusals of groups no longer served.
    auth_refused_before: u64,
    last_scan: Option<Instant>,
}

impl State {
    /// Reads the registry again; a group whose definition and secret did not change keeps its
    /// view. Problems are reported on stderr once each.
    fn rescan(&mut self, now: Instant) {
        self.last_scan = Some(now);
        let mut problems = Vec::new();
        let mut old: HashMap<String, Served> =
            self.groups.drain(..).map(|served| (served.config.name.clone(), served)).collect();
        let names = registry::group_names(&self.registry);
        if names.len() > MAX_GROUPS {
            problems.push(format!("{} groups in the registry: answering for the first {MAX_GROUPS}", names.len()));
        }
        for name in names.into_iter().take(MAX_GROUPS) {
            let loaded = registry::load_group(&name, &self.registry)
                .and_then(|config| Ok((config, registry::load_secret(&name, &self.registry)?)));
            let (config, secret) = match loaded {
                Ok(loaded) => loaded,
                Err(problem) => {
                    problems.push(format!("group {name:?} not answered for: {problem}"));
                    continue;
                }
            };
            let served = match old.remove(&name) {
                Some(served) if served.config == config && served.secret == secret => served,
                _ => Served::new(config, secret, self.own.member_id),
            };
            self.groups.push(served);
        }
        for gone in old.into_values() {
            self.auth_refused_before += gone.bootstrap_auth.counters().total() + gone.control_auth.counters().total();
        }
        self.by_namespace =
            self.groups.iter().enumerate().map(|(i, s)| (bootstrap_namespace(&s.config.name), i)).collect();
        self.by_fingerprint = self.groups.iter().enumerate().map(|(i, s)| (s.config.fingerprint(), i)).collect();
        for served in &mut self.groups {
            served.view.expire(now, FORGET_AFTER);
        }
        for problem in &problems {
            if !self.reported.contains(problem) {
                eprintln!("bootstrap responder: {problem}");
            }
        }
        self.reported = problems;
        self.counters.groups = self.groups.len() as u64;
    }

    fn handle(&mut self, index: usize, now: Instant) {
        let message = self.batch.message(index);
        let (Some(kind), Some(header)) = (message.get(1), message.get(8..16)) else {
            self.counters.malformed += 1;
            return;
        };
        let mut fingerprint = [0u8; 8];
        fingerprint.copy_from_slice(header);
        let fingerprint = u64::from_le_bytes(fingerprint);
        if *kind == Kind::Bootstrap as u8 {
            let Some(served) = self.by_namespace.get(&fingerprint).map(|i| &mut self.groups[*i]) else {
                self.counters.unknown_group += 1;
                return;
            };
            match answer_message(
                &mut served.bootstrap_auth,
                message,
                &served.config,
                self.own.clone(),
                &served.view,
                now,
            ) {
                Answered::Reply { request, bytes } => {
                    self.counters.answered += 1;
                    let dropped = self.replies.dropped;
                    self.replies.queue(request.reply_to, bytes, now);
                    self.counters.dropped += self.replies.dropped - dropped;
                }
                Answered::Refused => {}
                Answered::Malformed => self.counters.malformed += 1,
                Answered::OtherGroup => self.counters.unknown_group += 1,
            }
        } else if *kind == Kind::Heartbeat as u8 {
            let Some(served) = self.by_fingerprint.get(&fingerprint).map(|i| &mut self.groups[*i]) else {
                self.counters.unknown_group += 1;
                return;
            };
            let Ok(body) = served.control_auth.open(message) else { return };
            match parse_control(body) {
                Ok(ControlMessage::Heartbeat(heartbeat)) => {
                    self.counters.heartbeats += 1;
                    served.view.on_heartbeat(heartbeat, now);
                }
                Ok(_) => {}
                Err(_) => self.counters.malformed += 1,
            }
        }
        // Replies to this address's own refresh questions, acks: not for a responder.
    }

    /// One round; returns the work done.
    fn duty_cycle(&mut self, clock: &MonotonicClock) -> usize {
        let now = clock.now();
        if self.last_scan.is_none_or(|at| now.saturating_since(at) >= REGISTRY_RESCAN) {
            self.rescan(now);
        }
        self.batch.clear();
        let work = self.subscription.poll_into(&mut self.batch, CONTROL_FRAGMENTS_PER_ITERATION).unwrap_or(0);
        for index in 0..self.batch.len() {
            self.handle(index, now);
        }
        for endpoint in self.replies.take_wanted() {
            // A driver round trip; this thread is the responder's own.
            if let Ok(publication) = self.client.add_publication_handle(&control_channel(&endpoint), CONTROL_STREAM_ID)
            {
                self.replies.install(&endpoint, publication);
            }
        }
        let sent = self.replies.pump(clock.now());
        let refused: u64 = self
            .groups
            .iter()
            .map(|served| served.bootstrap_auth.counters().total() + served.control_auth.counters().total())
            .sum();
        self.counters.auth_refused = self.auth_refused_before + refused;
        work + sent
    }
}

/// A running responder (its thread stops on [`Self::close`] and on drop).
pub struct BootstrapResponder {
    endpoint: SocketAddr,
    stop: Arc<AtomicBool>,
    counters: Arc<Mutex<ResponderCounters>>,
    thread: Option<JoinHandle<()>>,
}

impl BootstrapResponder {
    /// Opens the inbox at `options.listen` on `client`, reads the registry once and starts the
    /// thread. Fails when the address cannot be bound (naming it).
    pub fn start(client: Arc<dyn ClientApi>, options: &ResponderOptions) -> Result<BootstrapResponder, GroupError> {
        let address = InboxAddress::Fixed { bind: options.listen, advertised: options.listen };
        let inbox = member::open_inbox(&*client, &address, &[CONTROL_STREAM_ID])?;
        let Some(subscription) = inbox.subscriptions.into_iter().next() else {
            return Err(GroupError::Transport(Error::Driver("bootstrap inbox opened without its stream".into())));
        };
        let own = BootstrapMember { member_id: new_member_id(), role: Role::Observer, endpoint: inbox.endpoint };
        let clock = MonotonicClock::new();
        let mut state = State {
            client,
            registry: options.registry.clone(),
            own,
            subscription,
            groups: Vec::new(),
            by_namespace: HashMap::new(),
            by_fingerprint: HashMap::new(),
            reported: Vec::new(),
            replies: Replies::default(),
            batch: MessageBatch::default(),
            counters: ResponderCounters::default(),
            auth_refused_before: 0,
            last_scan: None,
        };
        state.rescan(clock.now());
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Mutex::new(state.counters));
        let (thread_stop, thread_counters) = (stop.clone(), counters.clone());
        let thread = std::thread::Builder::new()
            .name("affinity-bootstrap".into())
            .spawn(move || {
                while !thread_stop.load(Ordering::Acquire) {
                    let work = state.duty_cycle(&clock);
                    *lock(&thread_counters) = state.counters;
                    if work == 0 {
                        std::thread::sleep(IDLE_SLEEP);
                    }
                }
                state.replies.clear();
                state.subscription.close();
            })
            .map_err(|e| GroupError::Transport(Error::Io(e)))?;
        Ok(BootstrapResponder { endpoint: options.listen, stop, counters, thread: Some(thread) })
    }

    /// The address it answers at.
    pub fn endpoint(&self) -> SocketAddr {
        self.endpoint
    }

    /// What it did so far.
    pub fn counters(&self) -> ResponderCounters {
        *lock(&self.counters)
    }

    /// Stops the thread and closes the inbox (idempotent).
    pub fn close(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for BootstrapResponder {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn options_are_taken_out_and_the_rest_left_for_the_driver() {
        let dir = std::env::temp_dir();
        let registry = dir.to_string_lossy().into_owned();
        let given = args(&["--dir", "/x", "--bootstrap-listen", "127.0.0.1:4100", "--registry=", "--mtu", "8k"]);
        let mut given = given;
        given[4] = format!("--registry={registry}");
        let (options, rest) = take_options(&given).unwrap();
        let options = options.unwrap();
        assert_eq!(options.listen, "127.0.0.1:4100".parse().unwrap());
        assert_eq!(options.registry, dir);
        assert_eq!(rest, args(&["--dir", "/x", "--mtu", "8k"]));
        let (none, rest) = take_options(&args(&["--mtu", "8k"])).unwrap();
        assert!(none.is_none());
        assert_eq!(rest.len(), 2);
        let (options, _) =
            take_options(&args(&["--bootstrap_listen=127.0.0.1:4101", "--registry", &registry])).unwrap();
        assert_eq!(options.unwrap().listen.port(), 4101);
    }

    #[test]
    fn bad_options_are_named() {
        for (given, expected) in [
            (&["--registry", "/tmp"][..], "--registry needs --bootstrap-listen"),
            (&["--bootstrap-listen"], "--bootstrap-listen needs a value"),
            (&["--bootstrap-listen", "0.0.0.0:4000"], "wildcard"),
            (&["--bootstrap-listen", "127.0.0.1:0"], "port 0"),
            (&["--bootstrap-listen", "127.0.0.1"], "host:port"),
            (&["--bootstrap-listen", "127.0.0.1:1", "--bootstrap-listen", "127.0.0.1:2"], "given twice"),
            (&["--bootstrap-listen", "127.0.0.1:1", "--registry", "/nonexistent/registry"], "not a directory"),
        ] {
            let error = take_options(&args(given)).unwrap_err();
            assert!(error.contains(expected), "{given:?}: {error}");
        }
    }

    #[test]
    fn the_usage_names_every_option() {
        let text = usage();
        for option in RESPONDER_OPTIONS {
            assert!(text.contains(&format!("{} {}", option.flag(), option.value)), "{text}");
        }
    }
}
