//! CloudWatch metrics without an agent: `[metrics] cloudwatch = true` writes one line
//! of CloudWatch embedded metric format (EMF) to stdout every `interval`. On ECS with
//! the `awslogs` driver (or any shipper into CloudWatch Logs) CloudWatch extracts the
//! metrics from those lines; no `PutMetricData` permission and no sidecar.
//! <https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>
//!
//! Only the metrics in [`PUBLISHED`] go to CloudWatch (each custom metric is billed);
//! `/metrics` keeps every metric with every label. Labels are folded away: gauges by
//! their maximum or sum, counters by the sum of what they grew since the last line.
//! The deploy/ templates' alarms use these names.

use crate::lossy::{LossyLines, Output};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use serde_json::{Map, Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How a metric's label sets are folded into one CloudWatch value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    /// The counters' growth since the previous line, summed.
    Delta,
    /// The largest gauge (e.g. the shard furthest behind).
    Max,
    /// The gauges summed (e.g. leases held).
    Sum,
}

/// One metric published to CloudWatch.
#[derive(Debug, Clone, Copy)]
pub struct Published {
    /// Its CloudWatch name.
    pub name: &'static str,
    /// The weir metric it is read from.
    pub source: &'static str,
    /// How label sets are folded.
    pub fold: Fold,
    /// CloudWatch unit.
    pub unit: &'static str,
}

/// Every metric `[metrics] cloudwatch = true` publishes (namespace `metrics.namespace`,
/// dimension `Application` = `leases.namespace`; the archiver's also per archiver,
/// dimensions `Application` and `Archiver`). `MillisBehindLatest` and `ReadFailures`
/// come from the workers' live gauges ([`crate::live_gauges`]), the rest from the
/// `metrics` recorder.
pub const PUBLISHED: &[Published] = &[
    Published {
        name: "ArchiveDataFreshness",
        source: weir_archiver::metrics::DATA_FRESHNESS,
        fold: Fold::Max,
        unit: "Seconds",
    },
    Published { name: "ArchiveErrorRecords", source: weir_archiver::metrics::ERRORS, fold: Fold::Delta, unit: "Count" },
    Published {
        name: "ArchiveBacklogBytes",
        source: weir_archiver::metrics::BACKLOG_BYTES,
        fold: Fold::Sum,
        unit: "Bytes",
    },
    Published {
        name: "ArchiveRecords",
        source: weir_archiver::metrics::RECORDS_ARCHIVED,
        fold: Fold::Delta,
        unit: "Count",
    },
    Published {
        name: "MillisBehindLatest",
        source: weir_runtime::metrics::MILLIS_BEHIND_LATEST,
        fold: Fold::Max,
        unit: "Milliseconds",
    },
    Published { name: "RecordsRead", source: weir_runtime::metrics::RECORDS_READ, fold: Fold::Delta, unit: "Count" },
    Published {
        name: "ConsumerFailures",
        source: weir_runtime::metrics::CONSUMER_FAILURES,
        fold: Fold::Delta,
        unit: "Count",
    },
    Published { name: "LeasesHeld", source: weir_runtime::metrics::LEASES_HELD, fold: Fold::Sum, unit: "Count" },
    Published {
        name: "ReadFailures",
        source: weir_runtime::metrics::SHARDS_READ_FAILING,
        fold: Fold::Sum,
        unit: "Count",
    },
];

fn published(name: &str) -> Option<&'static Published> {
    PUBLISHED.iter().find(|p| p.source == name)
}

/// A metrics recorder that keeps the [`PUBLISHED`] metrics (installed beside the
/// Prometheus recorder); every other metric is a no-op here.
#[derive(Clone)]
pub struct EmfRecorder {
    registry: Arc<Registry<Key, AtomicStorage>>,
}

impl std::fmt::Debug for EmfRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmfRecorder").finish_non_exhaustive()
    }
}

impl Default for EmfRecorder {
    fn default() -> Self {
        Self { registry: Arc::new(Registry::atomic()) }
    }
}

impl Recorder for EmfRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        match published(key.name()) {
            Some(_) => self.registry.get_or_create_counter(key, |c| Counter::from_arc(c.clone())),
            None => Counter::noop(),
        }
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        match published(key.name()) {
            Some(_) => self.registry.get_or_create_gauge(key, |g| Gauge::from_arc(g.clone())),
            None => Gauge::noop(),
        }
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// Builds EMF lines from an [`EmfRecorder`]'s values and the workers' live gauges;
/// remembers counter totals so that each line carries what happened since the
/// previous one.
#[derive(Debug)]
pub struct EmfWriter {
    recorder: EmfRecorder,
    namespace: String,
    application: String,
    worker: String,
    workers: Vec<crate::status::WorkerView>,
    last_counts: HashMap<Key, u64>,
}

/// The EMF dimension naming an archiver (from the metrics' `archiver` label).
pub const ARCHIVER_DIMENSION: &str = "Archiver";

/// Values folded per published metric name.
#[derive(Default)]
struct Folded(HashMap<&'static str, f64>);

impl Folded {
    fn add(&mut self, p: &Published, v: f64) {
        let slot = self.0.entry(p.name).or_insert(if p.fold == Fold::Max { f64::MIN } else { 0.0 });
        *slot = if p.fold == Fold::Max { slot.max(v) } else { *slot + v };
    }
}

impl EmfWriter {
    /// A writer for metrics in CloudWatch `namespace`, dimension `Application`.
    pub fn new(recorder: EmfRecorder, namespace: &str, application: &str, worker: &str) -> Self {
        Self {
            recorder,
            namespace: namespace.to_owned(),
            application: application.to_owned(),
            worker: worker.to_owned(),
            workers: Vec::new(),
            last_counts: HashMap::new(),
        }
    }

    /// Publishes these workers' live gauges too (lag of the shards read now, failing
    /// reads: see [`crate::live_gauges`]).
    pub fn with_workers(mut self, workers: Vec<crate::status::WorkerView>) -> Self {
        self.workers = workers;
        self
    }

    /// The EMF documents with the values at `now_ms` (Unix milliseconds): one per
    /// archiver with its own metrics (dimensions `Application`, `Archiver`), then one
    /// with every metric folded over all label sets (dimension `Application`, which
    /// the deploy/ alarms use). Metrics never recorded in this process are left out.
    pub fn lines(&mut self, now_ms: i64) -> Vec<Value> {
        let archiver_of = |key: &Key| {
            key.labels().find(|l| l.key() == weir_archiver::metrics::ARCHIVER).map(|l| l.value().to_owned())
        };
        let mut all = Folded::default();
        let mut archivers: std::collections::BTreeMap<String, Folded> = Default::default();
        let registry = &self.recorder.registry;
        let last = &mut self.last_counts;
        registry.visit_counters(|key, counter| {
            let Some(p) = published(key.name()) else { return };
            let total = counter.load(std::sync::atomic::Ordering::Relaxed);
            let before = last.insert(key.clone(), total).unwrap_or(0);
            let delta = total.saturating_sub(before) as f64;
            all.add(p, delta);
            if let Some(a) = archiver_of(key) {
                archivers.entry(a).or_default().add(p, delta);
            }
        });
        registry.visit_gauges(|key, gauge| {
            let Some(p) = published(key.name()) else { return };
            let v = f64::from_bits(gauge.load(std::sync::atomic::Ordering::Relaxed));
            all.add(p, v);
            if let Some(a) = archiver_of(key) {
                archivers.entry(a).or_default().add(p, v);
            }
        });
        if !self.workers.is_empty() {
            let live = crate::live_gauges::LiveGauges::of(&self.workers);
            if let Some(p) = published(weir_runtime::metrics::MILLIS_BEHIND_LATEST) {
                for ms in live.behind.values() {
                    all.add(p, *ms as f64);
                }
            }
            if let Some(p) = published(weir_runtime::metrics::SHARDS_READ_FAILING) {
                all.add(p, live.read_failing as f64);
            }
        }
        let mut docs: Vec<Value> =
            archivers.into_iter().map(|(name, values)| self.document(now_ms, &values, Some(&name))).collect();
        docs.push(self.document(now_ms, &all, None));
        docs
    }

    fn document(&self, now_ms: i64, values: &Folded, archiver: Option<&str>) -> Value {
        let mut doc = Map::new();
        let mut definitions = Vec::new();
        for p in PUBLISHED {
            if let Some(v) = values.0.get(p.name) {
                definitions.push(json!({ "Name": p.name, "Unit": p.unit }));
                doc.insert(p.name.to_owned(), json!(v));
            }
        }
        doc.insert("Application".into(), json!(self.application));
        doc.insert("WorkerId".into(), json!(self.worker));
        let dimensions = match archiver {
            Some(name) => {
                doc.insert(ARCHIVER_DIMENSION.into(), json!(name));
                json!([["Application", ARCHIVER_DIMENSION]])
            }
            None => json!([["Application"]]),
        };
        doc.insert(
            "_aws".into(),
            json!({
                "Timestamp": now_ms,
                "CloudWatchMetrics": [{
                    "Namespace": self.namespace,
                    "Dimensions": dimensions,
                    "Metrics": definitions,
                }],
            }),
        );
        Value::Object(doc)
    }
}

/// Writes a line to stdout every `interval` until `stop`, and a last one then (waited
/// for a little). Lines go through [`LossyLines`]: a stalled stdout reader never holds
/// the worker; lines it cannot take are dropped and counted.
pub fn spawn(mut writer: EmfWriter, interval: Duration, stop: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let out = match LossyLines::start(Output::Stdout, crate::lossy::DEFAULT_QUEUE) {
            Ok(out) => out,
            Err(e) => {
                tracing::error!(error = %e, "cannot start the CloudWatch metrics writer");
                return;
            }
        };
        let mut tick = tokio::time::interval(interval);
        tick.tick().await;
        loop {
            let stopping = tokio::select! {
                _ = stop.cancelled() => true,
                _ = tick.tick() => false,
            };
            for doc in writer.lines(chrono::Utc::now().timestamp_millis()) {
                out.line(&doc.to_string());
            }
            if stopping {
                let _ = tokio::task::spawn_blocking(move || out.flush_for(LAST_LINE_PATIENCE)).await;
                return;
            }
        }
    })
}

/// How long the last line at shutdown is waited for.
const LAST_LINE_PATIENCE: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_archiver::metrics as am;

    #[test]
    fn lines_fold_labels_and_carry_counter_growth_since_the_previous_line() {
        let recorder = EmfRecorder::default();
        let mut writer = EmfWriter::new(recorder.clone(), "weir", "mcp-tool-events", "w-1");
        metrics::with_local_recorder(&recorder, || {
            metrics::gauge!(weir_runtime::metrics::LEASES_HELD).set(3.0);
            metrics::counter!(am::ERRORS, "type" => "processing-failed").increment(2);
            metrics::counter!(am::ERRORS, "type" => "partitioning-failed").increment(5);
            metrics::counter!("weir_checkpoint_writes_total").increment(9);
        });
        let docs = writer.lines(1_700_000_000_000);
        assert_eq!(docs.len(), 1, "no archiver label: only the Application document");
        let first = &docs[0];
        assert_eq!(first["LeasesHeld"], json!(3.0));
        assert_eq!(first["ArchiveErrorRecords"], json!(7.0), "both error types summed");
        assert_eq!(first["Application"], json!("mcp-tool-events"));
        assert!(first.get("ArchiveDataFreshness").is_none(), "never recorded: left out");
        assert!(first.get("MillisBehindLatest").is_none(), "no worker reads anything");
        let aws = &first["_aws"];
        assert_eq!(aws["Timestamp"], json!(1_700_000_000_000i64));
        let directive = &aws["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], json!("weir"));
        assert_eq!(directive["Dimensions"], json!([["Application"]]));
        let names: Vec<&str> =
            directive["Metrics"].as_array().unwrap().iter().map(|m| m["Name"].as_str().unwrap()).collect();
        assert_eq!(names, ["ArchiveErrorRecords", "LeasesHeld"], "every value is declared");
        // Only what is published: weir_checkpoint_writes_total is not.
        assert_eq!(first.as_object().unwrap().len(), names.len() + 3);

        metrics::with_local_recorder(&recorder, || {
            metrics::counter!(am::ERRORS, "type" => "processing-failed").increment(1);
        });
        let second = writer.lines(1_700_000_060_000).pop().unwrap();
        assert_eq!(second["ArchiveErrorRecords"], json!(1.0), "growth since the previous line");
        assert_eq!(second["LeasesHeld"], json!(3.0), "gauges keep their value");
    }

    #[test]
    fn two_archivers_are_two_series_and_the_application_folds_them() {
        let recorder = EmfRecorder::default();
        let mut writer = EmfWriter::new(recorder.clone(), "weir", "app", "w-1");
        metrics::with_local_recorder(&recorder, || {
            metrics::gauge!(am::DATA_FRESHNESS, am::ARCHIVER => "archive").set(12.0);
            metrics::gauge!(am::DATA_FRESHNESS, am::ARCHIVER => "archive-backup").set(400.0);
            metrics::gauge!(am::BACKLOG_BYTES, am::ARCHIVER => "archive").set(100.0);
            metrics::gauge!(am::BACKLOG_BYTES, am::ARCHIVER => "archive-backup").set(50.0);
            metrics::counter!(am::ERRORS, "type" => "processing-failed", am::ARCHIVER => "archive").increment(4);
        });
        let docs = writer.lines(0);
        assert_eq!(docs.len(), 3, "one per archiver, then the Application's");
        let of = |name: &str| docs.iter().find(|d| d["Archiver"] == json!(name)).unwrap();
        assert_eq!(of("archive")["ArchiveDataFreshness"], json!(12.0));
        assert_eq!(of("archive-backup")["ArchiveDataFreshness"], json!(400.0), "not overwritten by the other");
        assert_eq!(of("archive")["ArchiveErrorRecords"], json!(4.0));
        assert!(of("archive-backup").get("ArchiveErrorRecords").is_none());
        assert_eq!(of("archive")["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([["Application", "Archiver"]]));
        let app = docs.last().unwrap();
        assert!(app.get("Archiver").is_none());
        assert_eq!(app["ArchiveDataFreshness"], json!(400.0), "the stalest archiver");
        assert_eq!(app["ArchiveBacklogBytes"], json!(150.0), "backlogs summed");
        assert_eq!(app["ArchiveErrorRecords"], json!(4.0), "counted once");
    }
}
