//! Logging never holds the data path: a closed log pipe (`weir run 2>&1 | head -3`)
//! and a stalled log reader (a container log driver in blocking mode) leave records
//! flowing, the dropped lines counted, and SIGTERM draining to exit 0 within
//! `shutdown_timeout`.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weir_testkit::patience::Patience;

/// The drain deadline the workers here are given.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a wait may go without progress before it fails (CI machines are shared
/// and slow down several-fold).
const NO_PROGRESS: Duration = Duration::from_secs(60);

fn weir() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.env_remove("WEIR_LOG").env_remove("WEIR_LOG_QUEUE").env("NO_COLOR", "1");
    c
}

/// A child process killed (and reaped) when the test ends, passing or failing.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A worker config: synthetic events counted and logged (a debug line per batch, about
/// twenty a second), SQLite leases, the endpoints on `port`, CloudWatch EMF lines on
/// stdout every second.
fn config(dir: &std::path::Path, port: u16) -> std::path::PathBuf {
    let p = dir.join("weir.toml");
    std::fs::write(
        &p,
        format!(
            "[worker]\nfailover = \"2s\"\nrenew_interval = \"500ms\"\ntaker_interval = \"500ms\"\n\
             shutdown_timeout = \"{}s\"\n\
             [generator]\nrate = 400\n[leases]\npath = \"{}/leases.db\"\n\
             [[consumers]]\ntype = \"count\"\nname = \"count\"\n\
             [[consumers]]\ntype = \"log\"\nname = \"log\"\n\
             [http]\nlisten = \"127.0.0.1:{port}\"\n\
             [metrics]\ncloudwatch = true\nnamespace = \"weir-test\"\ninterval = \"1s\"\n",
            SHUTDOWN_TIMEOUT.as_secs(),
            dir.display()
        ),
    )
    .unwrap();
    p
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn metrics(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

/// The value of the first sample of `name` whose labels contain `labels`.
fn sample(metrics: &str, name: &str, labels: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(labels))
        .find_map(|l| l.split_whitespace().last()?.parse().ok())
        .unwrap_or(0.0)
}

fn delivered(m: &str) -> f64 {
    sample(m, "weir_records_delivered_total", "consumer=\"count\"")
}

fn dropped(m: &str) -> f64 {
    sample(m, "weir_log_lines_dropped_total", "stream=\"stderr\"")
}

/// Scrapes until `done` holds; fails when records stop flowing for [`NO_PROGRESS`]
/// first (so a frozen worker fails, a slow one does not).
fn scrape_until(port: u16, what: &str, done: impl Fn(&str) -> bool) -> String {
    let mut patience = Patience::new(NO_PROGRESS);
    let mut last = -1.0f64;
    loop {
        if let Some(m) = metrics(port) {
            if done(&m) {
                return m;
            }
            last = last.max(delivered(&m));
        }
        if let Err(why) = patience.observe(last.to_bits()) {
            panic!("no records flowed waiting for {what}: {why}; {last} delivered");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Records keep flowing: the delivered count grows past what it is now.
fn records_keep_flowing(port: u16) {
    let now = delivered(&metrics(port).unwrap());
    scrape_until(port, "records to keep flowing", |m| delivered(m) > now);
}

/// SIGTERM; the worker drains and exits 0 within the shutdown timeout.
fn sigterm_drains(child: &mut KillOnDrop) {
    let kill = Command::new("kill").args(["-TERM", &child.0.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let asked = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(asked.elapsed() < SHUTDOWN_TIMEOUT, "no exit within shutdown_timeout of SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit after SIGTERM: {status}");
}

/// `weir run 2>&1 | head -3`: the reader reads three lines and goes. The worker
/// neither panics (tracing's write-error report used to, exit 101) nor stops: records
/// keep flowing, lines written to the closed pipe are counted as dropped, and SIGTERM
/// drains to exit 0.
#[test]
fn a_closed_log_pipe_neither_stops_nor_fails_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config(dir.path(), port);
    let (reader, writer) = std::io::pipe().unwrap();
    let mut child = KillOnDrop(
        weir()
            .args(["run", "--log-level", "debug", "--config", cfg.to_str().unwrap()])
            .stdout(Stdio::from(writer.try_clone().unwrap()))
            .stderr(Stdio::from(writer))
            .spawn()
            .unwrap(),
    );
    let mut lines = std::io::BufReader::new(reader).lines();
    for _ in 0..3 {
        lines.next().expect("three lines").unwrap();
    }
    drop(lines); // head exits: the pipe has no reader
    // Lines may drop before the first record is delivered: wait for both.
    let m = scrape_until(port, "lines dropped on the closed pipe and records delivered", |m| {
        dropped(m) > 0.0 && delivered(m) > 0.0
    });
    assert!(delivered(&m) > 0.0, "{m}");
    records_keep_flowing(port);
    assert!(child.0.try_wait().unwrap().is_none(), "the worker runs on");
    sigterm_drains(&mut child);
}

/// A log reader that stops reading: the pipe fills, then the queue of 16 lines; the
/// worker goes on (records flow, dropped lines are counted, /metrics answers) and
/// SIGTERM drains to exit 0 although nothing it logs can be written.
#[test]
fn a_stalled_log_reader_neither_stops_nor_holds_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config(dir.path(), port);
    let (reader, writer) = std::io::pipe().unwrap();
    // Fill the pipe so that the worker's first write already waits: a thread writes
    // until the pipe is full and stays blocked until the reader goes at the end.
    let mut filler = writer.try_clone().unwrap();
    let fill = std::thread::spawn(move || {
        let chunk = vec![b'.'; 4096];
        while filler.write_all(&chunk).is_ok() {}
    });
    let mut child = KillOnDrop(
        weir()
            .args(["run", "--log-level", "debug", "--log-queue", "16", "--config", cfg.to_str().unwrap()])
            .stdout(Stdio::from(writer.try_clone().unwrap()))
            .stderr(Stdio::from(writer))
            .spawn()
            .unwrap(),
    );
    let m = scrape_until(port, "lines dropped behind the stalled reader", |m| dropped(m) > 0.0);
    let first = dropped(&m);
    records_keep_flowing(port);
    scrape_until(port, "the drop counter to move on", |m| dropped(m) > first);
    sigterm_drains(&mut child);
    drop(reader); // the filler's write fails: it ends
    fill.join().unwrap();
}
