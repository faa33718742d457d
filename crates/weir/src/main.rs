//! The `weir` binary: every built-in consumer kind, the whole command line.
// The command line: standard output is where its answers go.
#![allow(clippy::print_stdout)]

fn main() -> std::process::ExitCode {
    weir::App::new().run()
}
