//! A SIGKILL storm: `weir run` workers on one stream, killed at random moments while
//! records are put, each replaced at once; then a wait until every consumer's
//! checkpoint reached the last record put on every shard.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use weir_aws::kinesis::producer::{Outgoing, Producer};
use weir_core::ports::LeaseTable;
use weir_core::{Checkpoint, ConsumerName, SequenceNumber, ShardId};

use crate::spawn_weir;

/// Writes a worker's config file: given the storm's directory and the worker's id.
pub type ConfigFn = Box<dyn Fn(&Path, &str) -> PathBuf + Send>;

/// Workers started from configs `config(dir, worker id)` writes, logs beside them.
pub struct Storm {
    dir: PathBuf,
    config: ConfigFn,
    /// The running workers: id and process.
    pub workers: Vec<(String, Child)>,
    started: usize,
}

impl Storm {
    /// `n` workers started.
    pub fn start(dir: &Path, n: usize, config: impl Fn(&Path, &str) -> PathBuf + Send + 'static) -> Storm {
        let mut storm = Storm { dir: dir.to_path_buf(), config: Box::new(config), workers: vec![], started: 0 };
        for _ in 0..n {
            storm.start_one();
        }
        storm
    }

    /// Puts `records` events (`event(i)` each, partition keys over 101 values) on
    /// `stream` in `waves` waves, killing a random worker at random moments (1.5–4 s
    /// apart) while each wave is consumed, `kills` times in all. Returns the last
    /// sequence number put on each shard, and the kills.
    pub async fn put_while_killing(
        &mut self,
        k: &aws_sdk_kinesis::Client,
        stream: &str,
        records: u64,
        waves: u64,
        kills: usize,
        event: impl Fn(u64) -> String,
    ) -> (BTreeMap<ShardId, SequenceNumber>, usize) {
        let producer = Producer::new(k.clone(), stream);
        let mut rng = rand::rng();
        let mut last: BTreeMap<ShardId, SequenceNumber> = BTreeMap::new();
        let mut killed = 0;
        let per_wave = records / waves;
        for wave in 0..waves {
            let batch = (wave * per_wave..(wave + 1) * per_wave)
                .map(|i| Outgoing { id: i, partition_key: format!("pk-{}", i % 101), data: Bytes::from(event(i)) })
                .collect();
            let report = producer.put_all(batch).await;
            assert_eq!(report.accepted.len() as u64, per_wave, "{:?}", report.failed.first());
            for a in report.accepted {
                let e = last.entry(a.shard).or_insert(a.sequence.clone());
                if a.sequence > *e {
                    *e = a.sequence;
                }
            }
            while killed < (wave as usize + 1) * kills / waves as usize {
                tokio::time::sleep(Duration::from_millis(rng.random_range(1500..4000))).await;
                self.kill_one(&mut rng);
                killed += 1;
            }
        }
        (last, killed)
    }

    fn start_one(&mut self) {
        self.started += 1;
        let id = format!("worker-{}", self.started);
        let cfg = (self.config)(&self.dir, &id);
        let child = spawn_weir(&cfg, &self.dir.join(format!("{id}.log")));
        self.workers.push((id, child));
    }

    /// SIGKILLs a random worker (which must still be running) and starts another.
    pub fn kill_one(&mut self, rng: &mut impl Rng) {
        let i = rng.random_range(0..self.workers.len());
        let (id, mut child) = self.workers.remove(i);
        assert!(child.try_wait().unwrap().is_none(), "{id} exited by itself\n{}", logs(&self.dir));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        eprintln!("killed {id}");
        self.start_one();
    }

    /// Kills every worker.
    pub fn stop(&mut self) {
        for (_, mut c) in self.workers.drain(..) {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }
}

impl Drop for Storm {
    fn drop(&mut self) {
        for (_, c) in &mut self.workers {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The storms' event `i`: session `r<i>`, tenant `t-<i % 7>`, tool `tool-<i % 5>`,
/// `ts` 1,764,400,000,000 + i (epoch milliseconds), `durationMs` i % 900, `success`
/// unless i is a multiple of 11 (readers check rows against these).
pub fn event(i: u64) -> String {
    format!(
        r#"{{"tenantId":"t-{}","toolName":"tool-{}","sessionId":"r{i}","ts":{},"durationMs":{},"success":{}}}"#,
        i % 7,
        i % 5,
        1_764_400_000_000u64 + i,
        i % 900,
        !i.is_multiple_of(11)
    )
}

/// The last lines of every worker log in `dir`.
pub fn logs(dir: &Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "log") {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(8).collect();
            out.push_str(&format!(
                "--- {}\n{}\n",
                e.path().display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
    }
    out
}

/// Waits until every consumer's checkpoint reached the last record put on each
/// shard; fails once no checkpoint moved for 300 s (not on wall time alone), with the
/// logs of the workers in `dir`.
pub async fn wait_checkpoints(
    leases: &dyn LeaseTable,
    last: &BTreeMap<ShardId, SequenceNumber>,
    consumers: &[&str],
    dir: &Path,
) {
    let mut patience = crate::patience::Patience::new(Duration::from_secs(300));
    loop {
        let all = leases.list().await.unwrap();
        let checkpoints: Vec<String> = all
            .iter()
            .flat_map(|l| {
                consumers.iter().map(|c| format!("{} {c} {:?}", l.key, l.checkpoint_for(&ConsumerName::new(*c))))
            })
            .collect();
        let done = |consumer: &str| {
            last.iter().all(|(shard, seq)| {
                all.iter().any(|l| {
                    &l.key == shard
                        && matches!(l.checkpoint_for(&ConsumerName::new(consumer)), Checkpoint::At(p) if p.sequence >= *seq)
                })
            })
        };
        if consumers.iter().all(|c| done(c)) {
            return;
        }
        if let Err(why) = patience.observe(&checkpoints) {
            panic!("consumers did not finish: {why}\n{}", logs(dir));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
