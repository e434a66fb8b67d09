//! `affinity driver` / `affinity-driver`: command-line options and the foreground run of the
//! media driver ([`crate::driver::agent::MediaDriver`]). The conductor that used to live here is
//! [`crate::driver::agent::conductor`]; its types are re-exported under their old paths.
//!
//! This module imports nothing from `client/`.

use std::path::PathBuf;
use std::time::Duration;

use crate::driver::agent::conductor::StandaloneConfig;
use crate::shm::directory;
use crate::shm::log_buffer::{LogParams, PAGE_MIN_SIZE};

/// Options of `affinity driver` / `affinity-driver`.
#[derive(Clone, Debug)]
pub struct DriverOptions {
    /// Driver settings (directory, timeouts, IPC and network defaults).
    pub config: StandaloneConfig,
    /// What the agent threads do when idle.
    pub idle: crate::driver::idle::IdleStrategy,
    /// `--threading`.
    pub threading: crate::driver::agent::Threading,
}

/// Usage text of the driver command (one place for the binary and the Python CLI).
pub const USAGE: &str = "usage: affinity driver [--dir PATH] [--threading dedicated|shared-network|shared]
                       [--idle spin|yield|backoff] [--term-length N] [--mtu N]
                       [--flow-control SPEC] [--receiver-timeout DUR]
                       [--client-timeout DUR] [--linger DUR] [--udp-offload on|off]
                       [--max-clients N] [--publications-per-client N]
                       [--subscriptions-per-client N] [--counters-per-client N]
                       [--commands-per-cycle-per-client N] [--queued-commands-per-client N]
  --dir               driver directory (default $AFFINITY_DIR, else /dev/shm/affinity-<login name>)
  --threading         dedicated: conductor, sender and receiver on three threads;
                      shared-network: conductor + one network thread; shared: one thread (default)
  --idle              idle strategy of the driver threads (default backoff)
  --term-length       term length of logs whose channel names none (default: aeron:ipc 64m,
                      aeron:udp 16m; given here, both)
  --mtu               MTU of logs whose channel names none (default 1408)
  --flow-control      flow control of multicast publications whose channel names no fc=
                      (max, min, tagged,g:<tag>[/<min size>], with an optional ,t:<timeout>)
  --receiver-timeout  a publication forgets a silent receiver after this long (default 5s)
  --client-timeout    a client silent this long is reclaimed (default 5s)
  --linger            a released publication waits at most this long for its subscribers (default 5s)
  --udp-offload       send runs of equal-sized datagrams as one send, receive them as one
                      (Linux UDP GSO/GRO; the datagrams on the wire are the same; default on)
  --max-clients       client ids the driver tracks at once (default 1024)
  --publications-per-client, --subscriptions-per-client, --counters-per-client
                      what one client may hold at once (defaults 1024, 1024, 2048)
  --commands-per-cycle-per-client
                      commands of one client run per duty cycle; clients take turns (default 16)
  --queued-commands-per-client
                      commands of one client waiting for their turn; more are refused (default 256)";

/// Parses driver command-line arguments (without the program name).
pub fn parse_args(args: &[String]) -> Result<DriverOptions, String> {
    use crate::channel::{parse_duration, parse_size};
    use crate::driver::context::{ranges, ClientQuota};
    let mut config = StandaloneConfig::new(directory::default_dir());
    let mut idle = crate::driver::idle::IdleStrategy::default();
    let mut threading = crate::driver::agent::Threading::Shared;
    let mut iter = args.iter();
    while let Some(flag) = iter.next() {
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (flag.as_str(), None),
        };
        if name == "-h" || name == "--help" {
            return Err(USAGE.to_string());
        }
        let mut value =
            || inline.clone().or_else(|| iter.next().cloned()).ok_or_else(|| format!("{name} needs a value\n{USAGE}"));
        let bad = |value: &str, error: String| format!("{name} {value:?}: {error}");
        match name {
            "--dir" => config.dir = PathBuf::from(value()?),
            "--threading" => {
                let v = value()?;
                threading = match v.as_str() {
                    "dedicated" | "shared-network" | "shared" => v.parse().map_err(|e| bad(&v, e))?,
                    _ => return Err(format!("--threading {v:?}: expected dedicated, shared-network or shared")),
                };
            }
            "--idle" => {
                let v = value()?;
                idle = v.parse().map_err(|e| bad(&v, e))?;
            }
            "--term-length" => {
                let v = value()?;
                let size = parse_size(&v).map_err(|e| bad(&v, e))?;
                let size = u32::try_from(size).map_err(|_| bad(&v, "too large".into()))?;
                config.ipc_term_length = size;
                config.context.term_length = size;
            }
            "--mtu" => {
                let v = value()?;
                let size = parse_size(&v).map_err(|e| bad(&v, e))?;
                let size = u32::try_from(size).map_err(|_| bad(&v, "too large".into()))?;
                config.mtu = size;
                config.context.mtu = size;
            }
            "--flow-control" => {
                let v = value()?;
                let spec = crate::flow_control::FlowControlSpec::parse(&v).map_err(|e| bad(&v, e.to_string()))?;
                let flow = &mut config.context.flow_control;
                flow.multicast_strategy = spec.strategy;
                flow.group_tag = spec.group_tag.or(flow.group_tag);
                flow.group_min_size = spec.group_min_size.unwrap_or(flow.group_min_size);
                if let Some(timeout) = spec.receiver_timeout {
                    flow.receiver_timeout = timeout;
                }
            }
            "--receiver-timeout" => {
                let v = value()?;
                let timeout = parse_duration(&v).map_err(|e| bad(&v, e))?;
                ranges::RECEIVER_TIMEOUT_MS.check(timeout.as_millis() as i128).map_err(|e| bad(&v, e.to_string()))?;
                config.context.flow_control.receiver_timeout = timeout;
            }
            "--client-timeout" => {
                let v = value()?;
                config.client_timeout = parse_duration(&v).map_err(|e| bad(&v, e))?;
                if config.client_timeout.is_zero() {
                    return Err(bad(&v, "must be positive".into()));
                }
            }
            "--linger" => {
                let v = value()?;
                config.publication_linger = parse_duration(&v).map_err(|e| bad(&v, e))?;
            }
            "--udp-offload" => {
                let v = value()?;
                config.context.udp_offload = match v.as_str() {
                    "on" => true,
                    "off" => false,
                    _ => return Err(bad(&v, "expected on or off".into())),
                };
            }
            other => {
                let Some(quota) = ClientQuota::ALL.into_iter().find(|quota| quota.option() == other) else {
                    return Err(format!("unknown option {other:?}\n{USAGE}"));
                };
                let v = value()?;
                let n: i128 = v.parse().map_err(|_| bad(&v, "expected a whole number".into()))?;
                let n = quota.range().check(n).map_err(|e| bad(&v, e.to_string()))?;
                *quota.of(&mut config.context.quotas) = n as usize;
            }
        }
    }
    // Check the log parameters once, at start, rather than on the first publication.
    LogParams {
        term_length: config.ipc_term_length,
        mtu: config.mtu,
        page_size: PAGE_MIN_SIZE,
        initial_term_id: 0,
        session_id: 0,
        stream_id: 0,
        correlation_id: 0,
    }
    .validate()
    .map_err(|e| format!("--term-length / --mtu: {e}"))?;
    config.context.validate().map_err(|e| format!("--term-length / --mtu / --receiver-timeout: {e}"))?;
    Ok(DriverOptions { config, idle, threading })
}

static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
}

fn install_signal_handlers() -> Result<(), String> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe); the sigaction struct
        // is zero-initialised and then filled in.
        let result = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if result != 0 {
            return Err(format!("cannot install a handler for signal {signal}: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Runs a driver in the foreground until SIGINT or SIGTERM (or `stop` becomes true), then shuts
/// down cleanly (end of stream to subscribers, files removed, and the directory too when nothing
/// else is left in it). Prints one line when ready.
pub fn run(options: DriverOptions, stop: Option<&std::sync::atomic::AtomicBool>) -> Result<(), String> {
    use crate::driver::agent::{MediaDriver, MediaDriverConfig};
    install_signal_handlers()?;
    STOP.store(false, std::sync::atomic::Ordering::Relaxed);
    let config = MediaDriverConfig { standalone: options.config, threading: options.threading, idle: options.idle };
    let driver = MediaDriver::launch(config).map_err(|e| e.to_string())?;
    if let Some(reason) = driver.took_over() {
        eprintln!("affinity driver: took over a stale directory ({reason})");
    }
    println!("affinity driver: pid {} ready in {}", std::process::id(), driver.dir().display());
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let stopping = || {
        STOP.load(std::sync::atomic::Ordering::Relaxed)
            || stop.is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
    };
    while !stopping() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let dir = driver.dir().to_path_buf();
    driver.close().map_err(|e| e.to_string())?;
    let removed = if crate::shm::directory::remove_if_empty(&dir) { " and removed" } else { "" };
    println!("affinity driver: stopped, {} cleaned up{removed}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_parsed_and_bad_ones_named() {
        let args: Vec<String> = ["--dir", "/tmp/x", "--idle=yield", "--term-length", "1m", "--client-timeout", "2s"]
            .map(String::from)
            .to_vec();
        let options = parse_args(&args).unwrap();
        assert_eq!(options.config.dir, PathBuf::from("/tmp/x"));
        assert_eq!(options.config.ipc_term_length, 1 << 20);
        assert_eq!(options.config.client_timeout, Duration::from_secs(2));
        assert!(parse_args(&["--term-length".into(), "1000".into()]).unwrap_err().contains("term length 1000"));
        assert!(parse_args(&["--threading".into(), "many".into()]).unwrap_err().contains("--threading \"many\""));
        let options = parse_args(&["--flow-control".into(), "min".into(), "--receiver-timeout=2s".into()]).unwrap();
        assert_eq!(options.config.context.flow_control.receiver_timeout, Duration::from_secs(2));
        assert!(parse_args(&["--flow-control".into(), "most".into()])
            .unwrap_err()
            .starts_with("--flow-control \"most\""));
        assert!(parse_args(&["--receiver-timeout".into(), "0s".into()]).unwrap_err().contains("receiver_timeout_ms"));
        assert!(parse_args(&["--mtu".into(), "33".into()]).unwrap_err().contains("mtu 33"));
        let options = parse_args(&["--threading".into(), "dedicated".into(), "--mtu=8k".into()]).unwrap();
        assert_eq!(options.threading, crate::driver::agent::Threading::Dedicated);
        assert_eq!(options.config.context.mtu, 8192);
        assert!(parse_args(&["--threading".into(), "invoker".into()]).unwrap_err().contains("expected dedicated"));
        assert!(parse_args(&["--bogus".into()]).unwrap_err().contains("unknown option"));
        assert!(parse_args(&["--dir".into()]).unwrap_err().contains("needs a value"));
        assert!(parse_args(&[]).unwrap().config.context.udp_offload, "offload is on by default");
        assert!(!parse_args(&["--udp-offload=off".into()]).unwrap().config.context.udp_offload);
        assert!(parse_args(&["--udp-offload".into(), "on".into()]).unwrap().config.context.udp_offload);
        let options =
            parse_args(&["--max-clients=9".into(), "--commands-per-cycle-per-client".into(), "3".into()]).unwrap();
        assert_eq!(
            (options.config.context.quotas.max_clients, options.config.context.quotas.commands_per_cycle_per_client),
            (9, 3)
        );
        assert_eq!(
            parse_args(&["--counters-per-client=0".into()]).unwrap_err(),
            "--counters-per-client \"0\": counters_per_client=0: must be between 1 and 1048576"
        );
        assert_eq!(
            parse_args(&["--udp-offload".into(), "yes".into()]).unwrap_err(),
            "--udp-offload \"yes\": expected on or off"
        );
    }
}
