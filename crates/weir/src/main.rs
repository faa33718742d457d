//! The `weir` binary: every built-in consumer kind, the whole command line.

fn main() -> std::process::ExitCode {
    weir::App::new().run()
}
