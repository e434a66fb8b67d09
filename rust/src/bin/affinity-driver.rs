//! `affinity-driver`: the standalone media driver in the foreground (same options as
//! `affinity driver`). Never links libpython.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match affinity::driver::standalone::parse_args(&args) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    if let Err(message) = affinity::driver::standalone::run(options, None) {
        eprintln!("affinity driver: {message}");
        std::process::exit(1);
    }
}
