//! `weir-tool-minutes`: the whole `weir` command line, plus the `tool-minutes` kind.

fn main() -> std::process::ExitCode {
    weir::App::new().consumer::<weir_example_tool_minutes::ToolMinutes>("tool-minutes").run()
}
