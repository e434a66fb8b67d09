//! JNI bridge of the JVM Spark sink (`jvm/src/affinity/spark/Native.java`).
//!
//! The executor JVM hands this library whole messages (envelope + Arrow IPC body, built in Java)
//! and the routing keys of its rows; the keyed routing (`affinity_hash(key) % HC % QC`), the
//! retention, acknowledgements and resends are the Rust core's [`GroupPublisher`], one per
//! (group, registry, placement) and JVM, on one client per driver and JVM: attached to the
//! standalone driver named by the `driverDir` option, else by `$AFFINITY_DIR` when it is set, else
//! an embedded driver. The placement options (`driverDir`, `host`, `control`, `bootstrap`) are the
//! Python writer's, with its messages: with `bootstrap` and no registry entry the
//! definition is learned from the first listed member that answers; with both, an answer holding
//! another definition is refused, naming both fingerprints.
//!
//! Handles are indices into a process-wide table (never pointers): a stale or forged handle is
//! an error, not a crash. Every entry point catches panics and turns every failure into a Java
//! exception: `affinity.spark.SparkOptionException` for what the user configured wrong,
//! `affinity.spark.AffinitySinkException` for what happened while sending.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use affinity::client::{check_channel, ClientHandle};
use affinity::control::member::DEFAULT_LIVENESS_TIMEOUT;
use affinity::embedded::{self, EmbeddedConfig};
use affinity::groups::bootstrap::{parse_bootstrap_list, DEFAULT_BOOTSTRAP_TIMEOUT, NO_ANSWER};
use affinity::groups::publisher::Refusal;
use affinity::groups::registry;
use affinity::groups::runtime::{self, GroupPublisher, MemberOptions};
use affinity::groups::{queue_of, GroupConfig, GroupError, DEFAULT_RESEND_TIMEOUT};
use affinity::shm::directory;
use jni::objects::{JByteArray, JByteBuffer, JClass, JIntArray, JLongArray, JString};
use jni::sys::{jboolean, jint, jlong, JNI_FALSE, JNI_TRUE};
use jni::JNIEnv;

/// Java exception thrown for a configuration the user got wrong (names the option).
pub const OPTION_EXCEPTION: &str = "affinity/spark/SparkOptionException";
/// Java exception thrown when rows could not be handed over (timeout, closed, transport).
pub const SINK_EXCEPTION: &str = "affinity/spark/AffinitySinkException";
/// First wait after a refused publish; doubled up to [`WAIT_MAX`] (as the Python sink).
pub const WAIT_START: Duration = Duration::from_micros(200);
/// Longest wait between two publish attempts.
pub const WAIT_MAX: Duration = Duration::from_millis(10);

/// How often a task waiting in `flushTo` looks at the acknowledged sequences.
pub const FLUSH_POLL: Duration = Duration::from_micros(500);
/// The environment variable Spark sets to the executor's address: the address a publisher
/// advertises when the `host` option is not given (as the Python writer's `advertised_host`).
pub const SPARK_LOCAL_IP_ENV: &str = "SPARK_LOCAL_IP";

/// A failure, as the Java exception it becomes.
#[derive(Debug)]
enum Failure {
    /// `SparkOptionException`.
    Option(String),
    /// `AffinitySinkException`.
    Sink(String),
    /// A JNI call failed (an exception is usually pending already).
    Jni(jni::errors::Error),
}

impl From<jni::errors::Error> for Failure {
    fn from(error: jni::errors::Error) -> Self {
        Failure::Jni(error)
    }
}

/// One group's publisher in this JVM.
struct Sink {
    config: GroupConfig,
    publisher: GroupPublisher,
}

/// Where a publisher joins its group: the sink's options `driverDir`, `host`, `control` and `bootstrap`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Placement {
    /// The standalone driver's directory (`driverDir`); `None`: `$AFFINITY_DIR`, else embedded.
    pub driver_dir: Option<String>,
    /// The address the publisher's inbox advertises (default `$SPARK_LOCAL_IP`, else the group's).
    pub host: Option<String>,
    /// An extra heartbeat channel.
    pub control: Option<String>,
    /// `host:port,...` of members to ask for the definition and the members.
    pub bootstrap: Option<String>,
}

/// What one publisher of this JVM serves: the group, its registry and its placement.
type Target = (String, PathBuf, Placement);

/// Which driver a client is attached to: a standalone driver's directory, or `None` (embedded).
type DriverKey = Option<PathBuf>;

#[derive(Default)]
struct State {
    clients: BTreeMap<DriverKey, Arc<ClientHandle>>,
    sinks: Vec<Option<Arc<Sink>>>,
    by_target: BTreeMap<Target, usize>,
}

static STATE: Mutex<State> =
    Mutex::new(State { clients: BTreeMap::new(), sinks: Vec::new(), by_target: BTreeMap::new() });

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The driver a publisher at `placement` uses: `driverDir`, else `$AFFINITY_DIR`, else embedded.
fn driver_key(placement: &Placement) -> DriverKey {
    placement
        .driver_dir
        .clone()
        .or_else(|| std::env::var(directory::ENV_DIR).ok())
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
}

/// Why attaching to a standalone driver failed, as the Python writer says it
/// (`affinity.spark.clients`): where the directory came from, the cause and the two fixes.
fn attach_failure(placement: &Placement, dir: &std::path::Path, error: &dyn std::fmt::Display) -> Failure {
    let (place, fallback) = match &placement.driver_dir {
        Some(given) => (format!("option driverDir='{given}'"), "remove driverDir".to_owned()),
        None => (
            format!("${}='{}' in this Spark worker's environment", directory::ENV_DIR, dir.display()),
            format!("unset {}", directory::ENV_DIR),
        ),
    };
    Failure::Option(format!(
        "{place}: {error}. Start the driver on every host of the cluster as the user Spark runs as \
         (affinity driver --dir {}), or {fallback} to give each Spark worker process an embedded driver",
        dir.display()
    ))
}

/// This JVM's client of the driver `placement` names, created once per driver.
fn client(state: &mut State, placement: &Placement) -> Result<Arc<ClientHandle>, Failure> {
    let key = driver_key(placement);
    if let Some(client) = state.clients.get(&key).filter(|c| !c.is_closed()) {
        return Ok(client.clone());
    }
    let client = match &key {
        Some(dir) => {
            let timeout = Duration::from_millis(directory::DRIVER_TIMEOUT_MS as u64);
            ClientHandle::attach(dir, timeout).map_err(|e| attach_failure(placement, dir, &e))?
        }
        None => ClientHandle::from(
            embedded::start(EmbeddedConfig::default())
                .map_err(|e| Failure::Sink(format!("cannot start the embedded driver: {e}")))?,
        ),
    };
    let client = Arc::new(client);
    state.clients.insert(key, client.clone());
    Ok(client)
}

/// Opens (or finds) this JVM's publisher of `group` at `placement`; returns its handle (≥ 1).
fn open_group(group: &str, registry: Option<&str>, placement: &Placement) -> Result<jlong, Failure> {
    let option = |message: String| {
        // Quoted as the Python writer's messages quote option values (Python's repr).
        let mut place = registry.map(|r| format!(" (registry='{r}')")).unwrap_or_default();
        if let Some(bootstrap) = &placement.bootstrap {
            place.push_str(&format!(" (bootstrap='{bootstrap}')"));
        }
        Failure::Option(format!("option group='{group}'{place}: {message}"))
    };
    if let Some(control) = &placement.control {
        check_channel(control).map_err(|e| Failure::Option(format!("option control='{control}': {e}")))?;
    }
    let dir = registry::registry_dir(registry).map_err(option)?;
    let bootstrap = match &placement.bootstrap {
        Some(list) => parse_bootstrap_list(list).map_err(|e| option(e.to_string()))?,
        None => Vec::new(),
    };
    let target = (group.to_owned(), dir.clone(), placement.clone());
    // The table is locked only to look up and to insert: the bootstrap exchange and the join
    // below may take seconds, and every publish of this JVM's tasks takes the lock.
    let client = {
        let mut state = state();
        if let Some(&index) = state.by_target.get(&target) {
            return Ok(index as jlong + 1);
        }
        client(&mut state, placement)?
    };
    let secret = registry::load_secret(group, &dir).map_err(option)?;
    let mut options = MemberOptions::new(dir.clone());
    options.secret = secret;
    let advertised =
        placement.host.clone().or_else(|| std::env::var(SPARK_LOCAL_IP_ENV).ok().filter(|v| !v.is_empty()));
    if let Some(host) = advertised {
        options.host = host;
    }
    options.control = placement.control.clone();
    let config = definition(client.as_ref(), group, &dir, &bootstrap, &options).map_err(option)?;
    options.bootstrap = bootstrap;
    let publisher = GroupPublisher::new(client, config.clone(), &options, DEFAULT_RESEND_TIMEOUT)
        .map_err(|e| Failure::Sink(format!("group {group:?}: cannot join as a publisher: {e}")))?;
    let mut state = state();
    if let Some(&index) = state.by_target.get(&target) {
        publisher.close(); // another task of this JVM opened it meanwhile: one publisher per target
        return Ok(index as jlong + 1);
    }
    state.sinks.push(Some(Arc::new(Sink { config, publisher })));
    let index = state.sinks.len() - 1;
    state.by_target.insert(target, index);
    Ok(index as jlong + 1)
}

/// The group's definition, as the Python writer finds it (`affinity.groups.learn_definition`):
/// the registry's without a bootstrap list; with one and no registry entry, the first answer
/// (waiting up to [`DEFAULT_BOOTSTRAP_TIMEOUT`]); with both, the registry's, after asking the
/// listed members for at most the liveness timeout: an answer holding another definition is
/// refused, naming both fingerprints, and no answer keeps the registry's.
fn definition(
    client: &ClientHandle,
    group: &str,
    dir: &std::path::Path,
    bootstrap: &[std::net::SocketAddr],
    options: &MemberOptions,
) -> Result<GroupConfig, String> {
    if bootstrap.is_empty() {
        return registry::load_group(group, dir);
    }
    let held = if registry::group_file(group, dir).is_file() { Some(registry::load_group(group, dir)?) } else { None };
    let timeout = if held.is_some() {
        DEFAULT_LIVENESS_TIMEOUT.min(DEFAULT_BOOTSTRAP_TIMEOUT)
    } else {
        DEFAULT_BOOTSTRAP_TIMEOUT
    };
    match runtime::bootstrap::fetch(client, group, held.as_ref(), bootstrap, options, timeout) {
        Ok(learned) => Ok(learned.config),
        Err(GroupError::Definition(message)) if message.contains(NO_ANSWER) => held.ok_or(message),
        Err(error) => Err(error.to_string()),
    }
}

fn sink(handle: jlong) -> Result<Arc<Sink>, Failure> {
    let state = state();
    usize::try_from(handle)
        .ok()
        .and_then(|h| h.checked_sub(1))
        .and_then(|index| state.sinks.get(index).cloned().flatten())
        .ok_or_else(|| Failure::Sink(format!("publisher handle {handle} is not open (closed at JVM shutdown?)")))
}

/// What a refusal code means, for messages.
fn outcome_name(code: i64) -> &'static str {
    match code {
        c if c == Refusal::NotConnected.code() => "NOT_CONNECTED (no live consumer)",
        c if c == Refusal::BackPressured.code() => "BACK_PRESSURED (consumers are behind)",
        c if c == Refusal::Closed.code() => "CLOSED",
        _ => "unknown outcome",
    }
}

/// Publishes one message to `queue`, waiting on back-pressure or a missing consumer until `timeout`.
fn publish(sink: &Sink, queue: u32, payload: &[u8], timeout: Duration) -> Result<i64, Failure> {
    let what = format!("group {:?} queue {queue}", sink.config.name);
    if queue >= sink.config.queue_count {
        return Err(Failure::Sink(format!("{what}: the group has {} queues", sink.config.queue_count)));
    }
    let deadline = Instant::now() + timeout;
    let mut delay = WAIT_START;
    loop {
        let code = match sink.publisher.publish_to_queue(queue, payload, b"") {
            Ok(code) => code,
            Err(GroupError::RecordTooLong { length, max }) => {
                return Err(Failure::Option(format!(
                "{what}: a message of {length} bytes exceeds the group's largest record ({max}); lower maxBatchBytes"
            )))
            }
            Err(error) => return Err(Failure::Sink(format!("{what}: {error}"))),
        };
        if code > 0 {
            return Ok(code);
        }
        if code == Refusal::Closed.code() {
            return Err(Failure::Sink(format!("{what}: the publisher is closed")));
        }
        if Instant::now() >= deadline {
            return Err(Failure::Sink(format!(
                "{what}: could not publish for ackTimeout={:?}, last outcome {}; rows were not dropped, \
                 the task fails so Spark can retry it",
                timeout,
                outcome_name(code)
            )));
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(WAIT_MAX);
    }
}

/// Waits until every queue's acknowledged sequence reaches `targets[queue]` (0: nothing to wait
/// for): the messages one task published, whatever the JVM's other tasks publish meanwhile.
fn flush_to(sink: &Sink, targets: &[i64], timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let status = sink.publisher.status();
        let done = targets.iter().enumerate().all(|(queue, &target)| {
            target <= 0
                || status.queues.iter().any(|q| q.queue as usize == queue && q.acked_sequence >= target.unsigned_abs())
        });
        if done {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(FLUSH_POLL);
    }
}

/// Closes every publisher and the client (JVM shutdown hook).
fn shutdown() {
    let mut state = state();
    for sink in state.sinks.iter_mut().filter_map(Option::take) {
        sink.publisher.close();
    }
    state.by_target.clear();
    for client in std::mem::take(&mut state.clients).into_values() {
        client.close();
    }
}

/// Runs `body`, turning an error or a panic into a pending Java exception and `fallback`.
fn guard<'local, T>(
    env: &mut JNIEnv<'local>,
    fallback: T,
    body: impl FnOnce(&mut JNIEnv<'local>) -> Result<T, Failure>,
) -> T {
    let outcome = catch_unwind(AssertUnwindSafe(|| body(env)));
    let failure = match outcome {
        Ok(Ok(value)) => return value,
        Ok(Err(failure)) => failure,
        Err(panic) => {
            let text = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into());
            Failure::Sink(format!("internal error in the affinity native library: {text}"))
        }
    };
    if env.exception_check().unwrap_or(true) {
        return fallback; // a JNI call already raised its exception
    }
    let (class, message) = match failure {
        Failure::Option(message) => (OPTION_EXCEPTION, message),
        Failure::Sink(message) => (SINK_EXCEPTION, message),
        Failure::Jni(error) => (SINK_EXCEPTION, format!("JNI: {error}")),
    };
    let _ = env.throw_new(class, message);
    fallback
}

fn timeout_of(millis: jlong, what: &str) -> Result<Duration, Failure> {
    u64::try_from(millis)
        .ok()
        .filter(|&m| m > 0)
        .map(Duration::from_millis)
        .ok_or_else(|| Failure::Option(format!("{what}: timeout {millis} ms must be positive")))
}

/// What a publish call names, checked: the open publisher `handle`, the queue (not negative) and
/// the timeout (positive); `what` names the call in the errors.
fn publish_target(
    handle: jlong,
    queue: jint,
    timeout_millis: jlong,
    what: &str,
) -> Result<(Arc<Sink>, u32, Duration), Failure> {
    let sink = sink(handle)?;
    let timeout = timeout_of(timeout_millis, what)?;
    let queue = u32::try_from(queue).map_err(|_| Failure::Sink(format!("{what}: queue {queue} < 0")))?;
    Ok((sink, queue, timeout))
}

/// A Java string that may be null.
fn optional_string(env: &mut JNIEnv<'_>, value: &JString<'_>) -> Result<Option<String>, Failure> {
    Ok(if value.is_null() { None } else { Some(env.get_string(value)?.into()) })
}

/// `static native long openGroup(String group, String registry, String driverDir, String host,
/// String control, String bootstrap)`: every argument but `group` may be null.
#[no_mangle]
pub extern "system" fn Java_affinity_spark_Native_openGroup<'local>(
    mut env: JNIEnv<'local>,
    _class: JClass<'local>,
    group: JString<'local>,
    registry: JString<'local>,
    driver_dir: JString<'local>,
    host: JString<'local>,
    control: JString<'local>,
    bootstrap: JString<'local>,
) -> jlong {
    guard(&mut env, 0, |env| {
        let group: String = env.get_string(&group)?.into();
        let registry = optional_string(env, &registry)?;
        let placement = Placement {
            driver_dir: optional_string(env, &driver_dir)?,
            host: optional_string(env, &host)?,
            control: optional_string(env, &control)?,
            bootstrap: optional_string(env, &bootstrap)?,
        };
        open_group(&group, registry.as_deref(), &placement)
    })
}

/// `static native int queueCount(long handle)`: the group's QC.
#[no_mangle]
pub extern "system" fn Java_affinity_spark_Native_queueCount<'local>(
    mut env: JNIEnv<'local>,
    _class: JClass<'local>,
    handle: jlong,
) -> jint {
    guard(&mut env, 0, |_| Ok(sink(handle)?.config.queue_count as jint))
}

/// `static native void queuesOf(long handle, byte[] keys, int[] ends, int count, int[] out)`:
/// the queue of each of `count` keys; key `i` is `keys[ends[i-1]..ends[i]]` (`ends[-1]` = 0).
#[no_mangle]
pub extern "system" fn Java_affinity_spark_Native_queuesOf<'local>(
    mut env: JNIEnv<'local>,
    _class: JClass<'local>,
    handle: jlong,
    keys: JByteArray<'local>,
    ends: JIntArray<'local>,
    count: jint,
    out: JIntArray<'local>,
) {
    guard(&mut env, (), |env| {
        let sink = sink(handle)?;
        let count = usize::try_from(count).map_err(|_| Failure::Sink(format!("queuesOf: count {count} < 0")))?;
        if count > env.get_array_length(&ends)? as usize || count > env.get_array_length(&out)? as usize {
            return Err(Failure::Sink(format!("queuesOf: count {count} exceeds the arrays")));
        }
        let mut bounds = vec![0i32; count];
        env.get_int_array_region(&ends, 0, &mut bounds)?;
        // Only the chunk's key bytes (the array is a reused buffer, usually larger).
        let capacity = env.get_array_length(&keys)? as usize;
        let used = bounds.last().map_or(Some(0), |&end| usize::try_from(end).ok().filter(|&e| e <= capacity));
        let used = used.ok_or_else(|| {
            Failure::Sink(format!("queuesOf: the last key ends at {:?}, outside 0..={capacity}", bounds.last()))
        })?;
        let mut signed = vec![0i8; used];
        env.get_byte_array_region(&keys, 0, &mut signed)?;
        let keys: Vec<u8> = signed.into_iter().map(|b| b as u8).collect();
        let mut queues = vec![0i32; count];
        let mut start = 0usize;
        for (i, &end) in bounds.iter().enumerate() {
            let end = usize::try_from(end).ok().filter(|&e| e >= start && e <= keys.len()).ok_or_else(|| {
                Failure::Sink(format!("queuesOf: key {i} ends at {end}, outside {start}..={}", keys.len()))
            })?;
            queues[i] = queue_of(&keys[start..end], sink.config.hash_count, sink.config.queue_count) as i32;
            start = end;
        }
        env.set_int_array_region(&out, 0, &queues)?;
        Ok(())
    })
}

/// `static native long publish(long handle, int queue, byte[] message, int length, long timeoutMillis)`:
/// the group's sequence number of the message, once taken (waits on back-pressure until the timeout).
#[no_mangle]
pub extern "system" fn Java_affinity_spark_Native_publish<'local>(
    mut env: JNIEnv<'local>,
    _class: JClass<'local>,
    handle: jlong,
    queue: jint,
    message: JByteArray<'local>,
    length: jint,
    timeout_millis: jlong,
) -> jlong {
    guard(&mut env, 0, |env| {
        let (sink, queue, timeout) = publish_target(handle, queue, timeout_millis, "publish")?;
        let total = env.get_array_length(&message)?;
        if length < 0 || length > total {
            return Err(Failure::Sink(format!("publish: length {length} outside 0..={total}")));
        }
        let mut bytes = vec![0i8; length as usize];
        env.get_byte_array_region(&message, 0, &mut bytes)?;
        // i8 and u8 have one layout; this reinterprets the copy without a second one.
        let bytes: Vec<u8> = bytes.into_iter().map(|b| b as u8).collect();
        publish(&sink, queue, &bytes, timeout)
    })
}

/// `static native long publishDirect(long handle, int queue, ByteBuffer message, int length, long timeoutMillis)`:
/// as `publish`, the message read in place from a direct buffer (no copy out of the JVM).
#[no_mangle]
pub extern "system" fn Java_affinity_spark_Native_publishDirect<'local>(
    mut env: JNIEnv<'local>,
    _class: JClass<'local>,
    handle: jlong,
    queue: jint,
    message: JByteBuffer<'local>,
    length: jint,
    timeout_millis: jlong,
) -> jlong {
    guard(&mut env, 0, |env| {
        let (sink, queue, timeout) = publish_target(handle, queue, timeout_millis, "publishDirect")?;
        if message.is_null() {
            return Err(Failure::Sink("publishDirect: the buffer is null".into()));
        }
        let address = env
            .get_direct_buffer_address(&message)
            .map_err(|e| Failure::Sink(format!("publishDirect: not a direct buffer ({e})")))?;
        let capacity = env.get_direct_buffer_capacity(&message)?;
        let length = usize::try_from(length)
            .ok()
            .filter(|&l| l <= capacity)
            .ok_or_else(|| Failure::Sink(format!("publishDirect: length {length} outside 0..={capacity}")))?;
        // SAFETY: `address` is the start of the direct buffer's `capacity` bytes, which the Java
        // caller keeps reachable (and does not write) for the duration of this call; `length` is
        // at most `capacity`.
        let bytes = unsafe { std::slice::from_raw_parts(address.cast_const(), length) };
        publish(&sink, queue, bytes, timeout)
    })
}

/// `static native boolean flushTo(long handle, long[] sequences, long timeoutMillis)`: whether
/// every queue `q` acknowledged up to `sequences[q]` (the group sequences `publish` returned)
/// within the timeout.
#[no_mangle]
pub extern "system" fn Java_affinity_spark_Native_flushTo<'local>(
    mut env: JNIEnv<'local>,
    _class: JClass<'local>,
    handle: jlong,
    sequences: JLongArray<'local>,
    timeout_millis: jlong,
) -> jboolean {
    guard(&mut env, JNI_FALSE, |env| {
        let sink = sink(handle)?;
        let timeout = timeout_of(timeout_millis, "flushTo")?;
        let length = env.get_array_length(&sequences)? as usize;
        if length > sink.config.queue_count as usize {
            return Err(Failure::Sink(format!("flushTo: {length} sequences for {} queues", sink.config.queue_count)));
        }
        let mut targets = vec![0i64; length];
        env.get_long_array_region(&sequences, 0, &mut targets)?;
        Ok(if flush_to(&sink, &targets, timeout) { JNI_TRUE } else { JNI_FALSE })
    })
}

/// `static native void shutdown()`: closes every publisher and the client (JVM shutdown hook).
#[no_mangle]
pub extern "system" fn Java_affinity_spark_Native_shutdown<'local>(mut env: JNIEnv<'local>, _class: JClass<'local>) {
    guard(&mut env, (), |_| {
        shutdown();
        Ok(())
    })
}
