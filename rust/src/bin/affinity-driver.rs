//! `affinity-driver`: the standalone media driver in the foreground (same options as
//! `affinity driver`, the bootstrap responder's included). Never links libpython.

use affinity::embedded::{run_driver_command, DriverCommandError};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
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
