//! `affinity driver` / `affinity-driver`: the command line (every option is a setting of
//! [`DriverContext`], `--term-length 64k` is `apply("term_length", "64k")`) and the foreground
//! run of the media driver ([`crate::driver::agent::MediaDriver`]).
//!
//! This module imports nothing from `client/`.

use std::time::Duration;

use crate::driver::context::{setting_kind, SettingKind, Threading, SETTINGS};
use crate::driver::DriverContext;

/// Usage text of the driver command (one place for the binary and the Python CLI), made from
/// [`SETTINGS`] and the defaults of [`DriverContext`].
pub fn usage() -> String {
    let defaults = DriverContext::default();
    let mut text = String::from(
        "usage: affinity driver [--NAME VALUE | --NAME=VALUE]...\n\
         Every option is a driver setting, also a keyword of affinity.Client(NAME=VALUE).\n\
         Sizes: 65536, 64k, 16m, 1g. Durations: 500ms, 2s, 1m (a unit is needed; the NAME_ms\n\
         form of a duration, e.g. --client-timeout-ms 5000, takes a bare number of milliseconds).\n",
    );
    for setting in SETTINGS {
        let value = match setting.kind {
            SettingKind::Path => "PATH",
            SettingKind::Choice => "NAME",
            SettingKind::Size => "SIZE",
            SettingKind::Duration => "DURATION",
            SettingKind::FlowControl => "SPEC",
            SettingKind::Switch => "on|off",
            SettingKind::Count => "N",
            SettingKind::Cpu => "CPU",
        };
        let default = match setting.name {
            "dir" => "$AFFINITY_DIR, else /dev/shm/affinity-<login name>".to_string(),
            name => defaults.value_of(name).unwrap_or_default(),
        };
        text.push_str(&format!("  {} {value}\n      {} (default {default})\n", setting.option(), setting.help));
    }
    text.pop();
    text
}

/// Parses driver command-line arguments (without the program name) into the driver's
/// settings: `--NAME VALUE` or `--NAME=VALUE` for each setting of [`SETTINGS`] (dashes or
/// underscores), checked by [`DriverContext::apply`] (the error names the setting and the value,
/// as `affinity.Client` reports them) and together by [`DriverContext::validate`]. A standalone
/// driver runs its own threads: `--threading invoker` is refused. `Err(usage)` for `--help`.
pub fn parse_args(args: &[String]) -> Result<DriverContext, String> {
    let mut context = DriverContext::default();
    let mut iter = args.iter();
    while let Some(flag) = iter.next() {
        let (option, inline) = match flag.split_once('=') {
            Some((option, value)) => (option, Some(value.to_string())),
            None => (flag.as_str(), None),
        };
        if option == "-h" || option == "--help" {
            return Err(usage());
        }
        let Some(name) = option.strip_prefix("--").map(|name| name.replace('-', "_")) else {
            return Err(format!("unexpected argument {option:?}\n{}", usage()));
        };
        if setting_kind(&name).is_none() {
            return Err(format!("unknown option {option:?}\n{}", usage()));
        }
        let value = inline.or_else(|| iter.next().cloned()).ok_or_else(|| format!("{option} needs a value"))?;
        context.apply(&name, &value).map_err(|e| e.to_string())?;
    }
    if context.threading == Threading::Invoker {
        return Err("threading=invoker: a standalone driver runs its own threads \
                    (shared, shared-network or dedicated)"
            .into());
    }
    context.validate().map_err(|e| e.to_string())?;
    Ok(context)
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
pub fn run(context: DriverContext, stop: Option<&std::sync::atomic::AtomicBool>) -> Result<(), String> {
    run_with(context, stop, |_| Ok(Box::new(())))
}

/// What a binary runs beside the driver ([`run_with`]): dropped before the driver closes.
pub type Companion = Box<dyn std::any::Any>;

/// [`run`], with `companion` started once the driver is ready (given its directory) and dropped
/// before the driver closes: how a binary composes the driver with something over the client
/// API (the bootstrap responder, `embedded::run_driver_command`) without this module knowing it.
/// A companion that fails to start stops the driver and is the error.
pub fn run_with(
    context: DriverContext,
    stop: Option<&std::sync::atomic::AtomicBool>,
    companion: impl FnOnce(&std::path::Path) -> Result<Companion, String>,
) -> Result<(), String> {
    use crate::driver::agent::MediaDriver;
    install_signal_handlers()?;
    STOP.store(false, std::sync::atomic::Ordering::Relaxed);
    let driver = MediaDriver::launch(context).map_err(|e| e.to_string())?;
    if let Some(reason) = driver.took_over() {
        eprintln!("affinity driver: took over a stale directory ({reason})");
    }
    println!("affinity driver: pid {} ready in {}", std::process::id(), driver.dir().display());
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let companion = match companion(driver.dir()) {
        Ok(companion) => companion,
        Err(message) => {
            let dir = driver.dir().to_path_buf();
            let _ = driver.close();
            crate::shm::directory::remove_if_empty(&dir);
            return Err(message);
        }
    };
    let stopping = || {
        STOP.load(std::sync::atomic::Ordering::Relaxed)
            || stop.is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
    };
    while !stopping() {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(companion);
    let dir = driver.dir().to_path_buf();
    driver.close().map_err(|e| e.to_string())?;
    let removed = if crate::shm::directory::remove_if_empty(&dir) { " and removed" } else { "" };
    println!("affinity driver: stopped, {} cleaned up{removed}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn parse(args: &[&str]) -> Result<DriverContext, String> {
        parse_args(&args.iter().map(|arg| arg.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn options_are_the_settings_with_dashes_and_values_inline_or_next() {
        let context =
            parse(&["--dir", "/tmp/x", "--idle=yield", "--term-length", "1m", "--client-timeout", "2s"]).unwrap();
        assert_eq!(context.dir, PathBuf::from("/tmp/x"));
        assert_eq!((context.ipc_term_length, context.term_length), (1 << 20, 1 << 20));
        assert_eq!(context.client_timeout, Duration::from_secs(2));
        let context = parse(&["--threading", "dedicated", "--mtu=8k", "--client-timeout-ms", "2500"]).unwrap();
        assert_eq!((context.threading, context.mtu), (Threading::Dedicated, 8192));
        assert_eq!(context.client_timeout, Duration::from_millis(2500));
        let context = parse(&["--flow-control", "min", "--receiver-timeout=2s", "--udp-offload=off"]).unwrap();
        assert_eq!(context.flow_control.receiver_timeout, Duration::from_secs(2));
        assert!(!context.udp_offload);
        let context = parse(&["--max-clients=9", "--commands_per_cycle_per_client", "3"]).unwrap();
        assert_eq!((context.quotas.max_clients, context.quotas.commands_per_cycle_per_client), (9, 3));
    }

    #[test]
    fn a_bad_option_is_refused_with_the_message_of_the_setting() {
        let cases = [
            (&["--term-length", "1000"][..], "term_length=1000: must be a power of two between 65536 and 1073741824"),
            (&["--threading", "many"], "threading=many: expected one of shared, shared-network, dedicated, invoker"),
            (&["--threading", "invoker"], "threading=invoker: a standalone driver runs its own threads"),
            (&["--flow-control", "most"], "flow_control=most: unknown flow control strategy \"most\""),
            (&["--receiver-timeout", "0s"], "receiver_timeout=0s: must be between 1ms and 3600s"),
            (&["--client-timeout", "5"], "client_timeout=5: a bare number is ambiguous here"),
            (&["--mtu", "33"], "mtu=33: must be a multiple of 32 between 64 and 65504"),
            (&["--counters-per-client=0"], "counters_per_client=0: must be between 1 and 1048576"),
            (&["--udp-offload", "yes"], "udp_offload=yes: expected on or off"),
            (&["--receiver-window", "1k"], "receiver_window=1024: must be between the mtu (1408) and 536870912"),
            (&["--bogus"], "unknown option \"--bogus\""),
            (&["--mtu-ms", "1"], "unknown option \"--mtu-ms\""),
            (&["--dir"], "--dir needs a value"),
            (&["stray"], "unexpected argument \"stray\""),
        ];
        for (args, expected) in cases {
            let error = parse(args).unwrap_err();
            assert!(error.starts_with(expected), "{args:?}: {error}");
        }
    }

    #[test]
    fn the_usage_lists_every_setting_with_its_default() {
        let text = usage();
        for setting in SETTINGS {
            assert!(text.contains(&format!("{} ", setting.option())), "{}", setting.name);
        }
        assert!(text.contains("(default aeron:ipc 64m, aeron:udp 16m)"), "{text}");
        assert!(text.contains("(default 2s)"), "the receiver timeout's real default: {text}");
        assert_eq!(parse(&["--help"]).unwrap_err(), text);
    }
}
