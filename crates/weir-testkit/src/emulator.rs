//! Real emulators for adapter tests, started per test run through
//! `tests/emulators/start.sh` (which installs the pinned version when missing) on a free
//! loopback port, and stopped by PID when the guard drops.

use std::path::PathBuf;
use std::process::Command;

/// A running emulator; stopped on drop.
#[derive(Debug)]
pub struct Emulator {
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    /// The port.
    pub port: u16,
    /// Its log file.
    pub log: PathBuf,
    pid: u32,
}

fn scripts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/emulators")
}

impl Emulator {
    /// Starts `name` (`ferrokinesis`, `kinesis-local`, `moto`, `s3s-fs`) with extra
    /// arguments. Panics with the script's message if it cannot start: adapter tests
    /// must not silently skip.
    ///
    /// The free port is chosen before the emulator binds it, so another process can
    /// take it in between (tests run in parallel): a start that fails with "address
    /// already in use" is tried again on a new port, up to three times.
    pub fn start(name: &str, args: &[&str]) -> Emulator {
        let mut attempt = 0;
        let out = loop {
            attempt += 1;
            let out = Command::new(scripts().join("start.sh"))
                .arg(name)
                .args(args)
                .output()
                .unwrap_or_else(|e| panic!("cannot run tests/emulators/start.sh: {e}"));
            let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            let port_taken = said.contains("EADDRINUSE") || said.contains("Address already in use");
            if out.status.success() || !port_taken || attempt == 3 {
                break out;
            }
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "emulator {name} did not start: {}{}",
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        let field = |k: &str| {
            stdout
                .split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")).map(str::to_owned))
                .unwrap_or_else(|| panic!("start.sh printed no {k}: {stdout}"))
        };
        let port: u16 = field("port").parse().expect("port");
        Emulator {
            endpoint: format!("http://127.0.0.1:{port}"),
            port,
            log: PathBuf::from(field("log")),
            pid: field("pid").parse().expect("pid"),
        }
    }
}

impl Emulator {
    /// Freezes the emulator (SIGSTOP): its port still accepts connections (the
    /// kernel's backlog) but nothing answers, as a hung service looks.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused emulator go on (SIGCONT), with its data intact.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill").arg(sig).arg(self.pid.to_string()).status().is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {} failed", self.pid);
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        // A paused emulator would not see its SIGTERM.
        let _ = Command::new("kill").arg("-CONT").arg(self.pid.to_string()).status();
        let _ = Command::new(scripts().join("stop.sh")).arg(self.pid.to_string()).status();
    }
}
