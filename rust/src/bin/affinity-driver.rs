//! `affinity-driver`: the standalone media driver in the foreground (same options as
//! `affinity driver`, the bootstrap responder's included). Never links libpython.

use affinity::embedded::{run_driver_command, DriverCommandError};

/// What `affinity-driver --router` says: the router's configuration is read and checked by the
/// Python package (`affinity driver --router FILE`), which this executable does not link.
const ROUTER_NEEDS_PYTHON: &str = "affinity-driver: --router: the routing configuration is read and checked by the \
     Python package; run `affinity driver --router FILE` (same driver options)";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|arg| arg == "--router" || arg.starts_with("--router=")) {
        eprintln!("{ROUTER_NEEDS_PYTHON}");
        std::process::exit(2);
    }
    match run_driver_command(&args, None) {
        Ok(()) => {}
        Err(DriverCommandError::Usage(message)) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
        Err(DriverCommandError::Failed(message)) => {
            eprintln!("affinity driver: {message}");
            std::process::exit(1);
        }
    }
}
