//! What the workers say about the shards they hold (their `/status`): consumers
//! detached and failing (with their last error, which names an archiver refusing
//! batches), and reads that stopped answering (a silent enhanced fan-out
//! subscription, or polling that no longer returns).

use std::time::Duration;

use anyhow::{Context, Result};

use super::Finding;
use crate::status::WorkerStatus;

/// Asks `base` (`http://host:port`, as in `http.listen`) for its `/status`.
pub(crate) async fn fetch(client: &reqwest::Client, base: &str) -> Result<Vec<WorkerStatus>> {
    let url = format!("{}/status", base.trim_end_matches('/'));
    let response = client.get(&url).send().await.with_context(|| format!("{url} did not answer"))?;
    let response = response.error_for_status().with_context(|| format!("{url} refused"))?;
    let body = response.bytes().await.with_context(|| format!("{url} broke off its answer"))?;
    serde_json::from_slice(&body).with_context(|| format!("{url} did not answer with a weir status"))
}

/// Findings from the workers' statuses. A read is silent when it has not answered
/// for `silent_after` (enhanced fan-out sends an event at least every few seconds,
/// records or not; polling answers every poll).
pub(crate) fn diagnose(workers: &[WorkerStatus], silent_after: Duration) -> Vec<Finding> {
    let mut out = Vec::new();
    for w in workers {
        for s in &w.shards {
            let finding = |stuck, text: String| Finding { shard: s.shard.clone(), stuck, text };
            // The in-process stream's reads wait for records: quiet is not silent.
            let answers_when_idle = matches!(w.read.as_str(), "enhanced fan-out" | "polling");
            let silent = match s.last_answer_ms_ago {
                _ if !answers_when_idle => None,
                None => Some("has not answered since the worker took the lease".to_owned()),
                Some(ms) if Duration::from_millis(ms) >= silent_after => {
                    Some(format!("has not answered for {:?}", Duration::from_millis(ms)))
                }
                Some(_) => None,
            };
            if let Some(silent) = silent {
                let what = if w.read == "enhanced fan-out" {
                    "its enhanced fan-out subscription is silent: it"
                } else {
                    "its read"
                };
                out.push(finding(
                    true,
                    format!(
                        "held by {}, but {what} {silent} (read errors are in {}'s log and weir_read_errors_total)",
                        w.worker, w.worker
                    ),
                ));
            }
            for c in &s.consumers {
                let error = c.last_error.as_deref().map(|e| format!(": its last error was {e}")).unwrap_or_default();
                if c.detached {
                    out.push(finding(
                        true,
                        format!(
                            "{} is detached on {}'s read of this shard after {} failed calls{error}; it retries and catches up on its own once the cause is gone",
                            c.consumer, w.worker, c.failures
                        ),
                    ));
                } else if c.failures > 0 {
                    out.push(finding(
                        false,
                        format!("{} failed {} calls on {}{error}", c.consumer, c.failures, w.worker),
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio_util::sync::CancellationToken;
    use weir_core::{Consumer, WorkerId};
    use weir_local::{MemoryStream, StreamOptions};
    use weir_runtime::{RuntimeConfig, TokioClock, Worker};
    use weir_testkit::{AckMode, MemoryLeaseTable, RecordingConsumer};

    use crate::status::{LaneStatus, ShardStatus, WorkerView, report};

    /// A real worker whose `archive` consumer fails every call: its status shows the
    /// lane detached with the error, and the doctor names it; `alerts`, healthy on the
    /// same shard, is not mentioned.
    #[tokio::test(start_paused = true)]
    async fn a_failing_consumer_is_named_with_its_last_error() {
        let clock = Arc::new(TokioClock::new());
        let stream = MemoryStream::new(StreamOptions { shards: 1, ..StreamOptions::default() }, clock.clone());
        let (archive, failing) = RecordingConsumer::new("archive", AckMode::Immediately);
        let (alerts, _) = RecordingConsumer::new("alerts", AckMode::Immediately);
        failing.fail_next(u32::MAX, false);
        let consumers: Vec<Box<dyn Consumer>> = vec![Box::new(archive), Box::new(alerts)];
        let worker = Worker::new(
            RuntimeConfig::new(WorkerId::new("w-1")),
            Arc::new(MemoryLeaseTable::new()),
            Arc::new(stream.clone()),
            Arc::new(stream.clone()),
            consumers,
            clock,
        )
        .unwrap();
        let view = WorkerView::new("w-1", "polling", worker.stats());
        let stop = CancellationToken::new();
        let running = tokio::spawn(worker.run(stop.clone()));
        for i in 0..20 {
            stream.put(&format!("k{i}"), bytes::Bytes::from_static(b"{}"));
        }
        let mut status = report(&view);
        for _ in 0..600 {
            if status.shards.iter().any(|s| s.consumers.iter().any(|c| c.consumer == "archive" && c.detached)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            status = report(&view);
        }
        stop.cancel();
        running.await.unwrap().unwrap();
        let f = diagnose(&[status.clone()], Duration::from_secs(30));
        let detached: Vec<_> = f.iter().filter(|f| f.text.starts_with("archive is detached")).collect();
        assert_eq!(detached.len(), 1, "{f:?} from {status:?}");
        assert!(detached[0].stuck, "{f:?}");
        assert!(
            detached[0].text.contains("on w-1's read") && detached[0].text.contains("last error was on_batch: "),
            "{f:?}"
        );
        assert!(f.iter().all(|f| !f.text.contains("alerts")), "{f:?}");
    }

    fn shard(ms_ago: Option<u64>) -> ShardStatus {
        ShardStatus { shard: "shardId-1".into(), records_read: 0, last_answer_ms_ago: ms_ago, consumers: vec![] }
    }

    fn worker(read: &str, shards: Vec<ShardStatus>) -> WorkerStatus {
        WorkerStatus { worker: "w-9".into(), read: read.into(), ready: true, problems: Vec::new(), shards }
    }

    /// An enhanced fan-out read that has not answered for `silent_after` is silent;
    /// one that answered recently is not; the in-process stream is never silent.
    #[test]
    fn silent_reads() {
        let t = Duration::from_secs(30);
        let f = diagnose(&[worker("enhanced fan-out", vec![shard(Some(45_000))])], t);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].stuck && f[0].text.contains("enhanced fan-out subscription is silent: it has not answered for 45s"),
            "{f:?}"
        );
        let f = diagnose(&[worker("polling", vec![shard(None)])], t);
        assert!(f[0].stuck && f[0].text.contains("its read has not answered since the worker took the lease"), "{f:?}");
        assert!(diagnose(&[worker("enhanced fan-out", vec![shard(Some(2_000))])], t).is_empty());
        assert!(diagnose(&[worker("in-process", vec![shard(None)])], t).is_empty());
        // Failures on an attached consumer are a note.
        let mut s = shard(Some(1));
        s.consumers.push(LaneStatus {
            consumer: "enrich".into(),
            records: 5,
            failures: 2,
            detached: false,
            last_error: Some("on_batch: lookup table gone".into()),
        });
        let f = diagnose(&[worker("polling", vec![s])], t);
        assert!(
            !f[0].stuck && f[0].text == "enrich failed 2 calls on w-9: its last error was on_batch: lookup table gone",
            "{f:?}"
        );
    }
}
