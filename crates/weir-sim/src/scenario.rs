//! What one simulation does: the fleet, the stream, the archivers' settings, the fault
//! rates and the timeline of faults. [`Scenario::from_seed`] draws all of it from a
//! seed; directed tests write one by hand.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir_archiver::Overflow;
use weir_firehose::Compression;

use crate::faults::{Port, Rates};
use crate::records::{Oddities, RecordShape};

/// One archiver's settings.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Consumer name; it writes under `<name>/`.
    pub name: String,
    /// Object format.
    pub format: Compression,
    /// `IntervalInSeconds`.
    pub interval_secs: u64,
    /// Buffer size before compression at which an object is sealed.
    pub size_bytes: u64,
    /// `max_buffer_memory`.
    pub memory: usize,
    /// Spill to disk past the memory budget.
    pub spill: bool,
    /// A Lambda transform (which the world makes fail records at times).
    pub lambda: bool,
    /// Inline intents (per round, per lease); (0, 0): every round in a manifest.
    pub inline: (usize, usize),
    /// A partition cap and what happens past it.
    pub max_active: Option<(usize, Overflow)>,
}

impl Shape {
    /// An archiver with plain settings: GZIP, a minute, no cap.
    pub fn plain(name: &str) -> Self {
        Self {
            name: name.into(),
            format: Compression::Gzip,
            interval_secs: 60,
            size_bytes: 64 << 20,
            memory: 256 << 20,
            spill: false,
            lambda: false,
            inline: (16, 128),
            max_active: None,
        }
    }
}

/// Something that happens at a planned time.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The node crashes now (its calls never return, its tasks are aborted).
    Crash(usize),
    /// The node crashes at its n-th call from now, before or after the call takes
    /// effect.
    CrashAtCall(usize, u64),
    /// A crashed node starts again (a new process with the same worker id).
    Restart(usize),
    /// The node stops making calls (a GC pause, SIGSTOP, a partition)...
    Pause(usize),
    /// ...and goes on, with what it believed before.
    Resume(usize),
    /// The node is asked to stop (SIGTERM): drain, checkpoint, release.
    Stop(usize),
    /// A new worker joins (balancing steals leases from the others).
    Start,
    /// The operator releases a lease (`weir leases release`).
    Release(usize),
    /// An open shard splits.
    Split(usize),
    /// Two adjacent open shards merge.
    Merge(usize),
    /// A port fails every call (`true`) or recovers.
    Outage(Port, bool),
    /// The Lambda fails this share of records from now on.
    LambdaFailing(f64),
}

/// A whole simulation.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The seed (faults, scheduling, names).
    pub seed: u64,
    /// Shards at the start.
    pub shards: usize,
    /// Workers at the start.
    pub workers: usize,
    /// Records written.
    pub records: u64,
    /// Over this long.
    pub load: Duration,
    /// Their shape.
    pub shape: RecordShape,
    /// Partitions (tenants).
    pub tenants: u32,
    /// Odd parts.
    pub oddities: Oddities,
    /// The archivers every worker runs.
    pub archivers: Vec<Shape>,
    /// Fault rates per port until the faults stop.
    pub rates: BTreeMap<Port, Rates>,
    /// What happens when, until the faults stop.
    pub events: Vec<(Duration, Event)>,
    /// When the faults stop: then crashed workers restart, paused ones resume, outages
    /// end, and every shard must be archived and checkpointed within the liveness
    /// bound.
    pub faults_end: Duration,
    /// The archivers may not list the bucket (no `s3:ListBucket`): S3 then refuses
    /// reads of missing keys, and leftover manifests are not swept.
    pub list_denied: bool,
}

impl Scenario {
    /// A quiet scenario: one worker, two shards, a few hundred plain records, no faults.
    pub fn quiet(seed: u64) -> Self {
        Self {
            seed,
            shards: 2,
            workers: 1,
            records: 300,
            load: Duration::from_secs(60),
            shape: RecordShape::Plain,
            tenants: 5,
            oddities: Oddities { malformed: 0.0, misfit: 0.0 },
            archivers: vec![Shape::plain("a1")],
            rates: BTreeMap::new(),
            events: Vec::new(),
            faults_end: Duration::from_secs(60),
            list_denied: false,
        }
    }

    /// The longest buffer interval of the archivers.
    pub fn longest_interval(&self) -> Duration {
        Duration::from_secs(self.archivers.iter().map(|a| a.interval_secs).max().unwrap_or(0))
    }

    /// How long, after the faults stop, every record may take to be archived and
    /// checkpointed: a buffer interval, plus failovers, forced handoffs, backoffs and
    /// slow calls.
    pub fn liveness_bound(&self) -> Duration {
        self.longest_interval() + Duration::from_secs(300)
    }

    /// One line saying what the scenario is.
    pub fn summary(&self) -> String {
        let shapes: Vec<String> = self
            .archivers
            .iter()
            .map(|a| {
                format!(
                    "{}:{:?}/{}s/{}B/mem{}{}{}{}/inline{:?}{}",
                    a.name,
                    a.format,
                    a.interval_secs,
                    a.size_bytes,
                    a.memory,
                    if a.spill { "+spill" } else { "" },
                    if a.lambda { "+lambda" } else { "" },
                    "",
                    a.inline,
                    a.max_active.map(|(n, o)| format!("/cap{n}{o:?}")).unwrap_or_default()
                )
            })
            .collect();
        format!(
            "seed {} | {} shards, {} workers, {} {:?} records over {}s, {} tenants | {}{} | {} events until {}s",
            self.seed,
            self.shards,
            self.workers,
            self.records,
            self.shape,
            self.load.as_secs(),
            self.tenants,
            shapes.join(" "),
            if self.list_denied { " | no ListBucket" } else { "" },
            self.events.len(),
            self.faults_end.as_secs()
        )
    }

    /// Everything drawn from `seed`.
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let r = &mut rng;
        let shards = r.random_range(1..=4);
        let workers = r.random_range(1..=3);
        let records = r.random_range(100..=1_200);
        let load = Duration::from_secs(r.random_range(60..=400));
        let shape = match r.random_range(0..10) {
            0..6 => RecordShape::Plain,
            6..8 => RecordShape::Concatenated,
            _ => RecordShape::CloudWatchLogs,
        };
        let tenants = *pick(r, &[1, 3, 10, 40, 200]);
        let oddities = Oddities {
            malformed: if r.random_bool(0.5) { r.random_range(0.0..0.05) } else { 0.0 },
            misfit: if r.random_bool(0.3) { r.random_range(0.0..0.05) } else { 0.0 },
        };
        let count = if r.random_bool(0.3) { 2 } else { 1 };
        let archivers = (1..=count).map(|i| random_shape(r, &format!("a{i}"))).collect();
        let mut rates = BTreeMap::new();
        for port in [Port::Table, Port::Store, Port::Stream, Port::Lambda] {
            let busy = r.random_bool(0.7);
            let p = |r: &mut StdRng, max: f64| if busy && r.random_bool(0.6) { r.random_range(0.0..max) } else { 0.0 };
            rates.insert(
                port,
                Rates {
                    fail: p(r, if port == Port::Lambda { 0.2 } else { 0.03 }),
                    lose_reply: p(r, 0.03),
                    slow: p(r, 0.02),
                    slow_max_ms: r.random_range(1_000..=15_000),
                    jitter_ms: *pick(r, &[0, 2, 20, 100]),
                },
            );
        }
        let horizon = load + Duration::from_secs(60);
        let mut events = Vec::new();
        let mut nodes = workers;
        for _ in 0..r.random_range(0..=12) {
            let at = Duration::from_millis(r.random_range(0..horizon.as_millis() as u64));
            let node = r.random_range(0..nodes);
            let later = |r: &mut StdRng, lo: u64, hi: u64| at + Duration::from_secs(r.random_range(lo..=hi));
            match r.random_range(0..100) {
                0..20 => {
                    events.push((at, Event::Crash(node)));
                    events.push((later(r, 1, 60), Event::Restart(node)));
                }
                20..35 => {
                    events.push((at, Event::CrashAtCall(node, r.random_range(1..400))));
                    events.push((later(r, 5, 90), Event::Restart(node)));
                }
                35..50 => {
                    events.push((at, Event::Pause(node)));
                    events.push((later(r, 5, 40), Event::Resume(node)));
                }
                50..58 => events.push((at, Event::Stop(node))),
                58..68 => {
                    events.push((at, Event::Start));
                    nodes += 1;
                }
                68..78 => events.push((at, Event::Release(r.random_range(0..8)))),
                78..84 => events.push((at, Event::Split(r.random_range(0..8)))),
                84..88 => events.push((at, Event::Merge(r.random_range(0..8)))),
                88..95 => {
                    let port = *pick(r, &[Port::Table, Port::Store, Port::Stream, Port::Lambda]);
                    events.push((at, Event::Outage(port, true)));
                    events.push((later(r, 1, 90), Event::Outage(port, false)));
                }
                _ => events.push((at, Event::LambdaFailing(r.random_range(0.0..0.5)))),
            }
        }
        events.sort_by_key(|(at, _)| *at);
        let faults_end = events.last().map_or(load, |(at, _)| (*at).max(load)) + Duration::from_secs(10);
        // Drawn last: the draws above (and so the scenarios of earlier seeds) stay.
        let list_denied = r.random_bool(0.2);
        Self {
            seed,
            shards,
            workers,
            records,
            load,
            shape,
            tenants,
            oddities,
            archivers,
            rates,
            events,
            faults_end,
            list_denied,
        }
    }
}

fn pick<'a, T>(r: &mut StdRng, from: &'a [T]) -> &'a T {
    &from[r.random_range(0..from.len())]
}

fn random_shape(r: &mut StdRng, name: &str) -> Shape {
    let format = *pick(
        r,
        &[
            Compression::Gzip,
            Compression::Gzip,
            Compression::Uncompressed,
            Compression::Zip,
            Compression::Snappy,
            Compression::HadoopSnappy,
            Compression::Parquet,
            Compression::Parquet,
        ],
    );
    let small_memory = r.random_bool(0.35);
    Shape {
        name: name.into(),
        format,
        interval_secs: *pick(r, &[0, 1, 10, 60, 60, 300, 900]),
        size_bytes: *pick(r, &[300, 2_000, 20_000, 64 << 20]),
        memory: if small_memory { r.random_range(2_000..60_000) } else { 256 << 20 },
        spill: small_memory && r.random_bool(0.4),
        lambda: r.random_bool(0.3),
        inline: *pick(r, &[(16, 128), (16, 128), (0, 0), (2, 4)]),
        max_active: if r.random_bool(0.2) {
            Some((r.random_range(1..20), *pick(r, &[Overflow::FlushOldest, Overflow::Reject])))
        } else {
            None
        },
    }
}
