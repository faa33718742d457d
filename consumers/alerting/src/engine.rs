//! Windowed evaluation of rules: pure, time passed in.
//!
//! Events are bucketed by event time in steps of the rule's `every`. The watermark is
//! the latest event time seen minus the allowed lateness; when no event arrived for a
//! whole window of clock time it follows the clock instead (so alerts resolve when
//! traffic stops). A window `[end - window, end)` is evaluated once the watermark
//! passes `end`; an event older than the last evaluated end is *late*: counted, never
//! added to a window it no longer belongs to.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use jaq_json::Val;
use serde::Serialize;
use sketches_ddsketch::{Config as SketchConfig, DDSketch};
use weir_core::Timestamp;

use crate::rule::{Aggregate, Rule};
use weir_core::jq::{key_text, truthy};

/// An event as the engine sees it.
pub struct Event<'a> {
    /// The parsed record.
    pub value: &'a Val,
    /// Event time.
    pub time: Timestamp,
    /// `success`.
    pub success: Option<bool>,
    /// `errorCode`.
    pub error_code: Option<&'a str>,
    /// `durationMs`.
    pub duration_ms: Option<f64>,
    /// Where the record came from (`shard/sequence`), for samples.
    pub id: &'a str,
}

#[derive(Clone)]
struct Bucket {
    count: u64,
    failures: u64,
    with_code: u64,
    durations: DDSketch,
    first: i64,
    last: i64,
    samples: Vec<String>,
}

impl Bucket {
    fn new(t: i64) -> Self {
        Self {
            count: 0,
            failures: 0,
            with_code: 0,
            durations: DDSketch::new(SketchConfig::defaults()),
            first: t,
            last: t,
            samples: Vec::new(),
        }
    }
}

#[derive(Default)]
struct Group {
    values: BTreeMap<String, String>,
    buckets: BTreeMap<i64, Bucket>,
    firing: Option<i64>,
}

/// An alert (or its resolution).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    /// The rule.
    pub rule: String,
    /// `firing` or `resolved`.
    pub state: &'static str,
    /// The group: each `group_by` expression and its value.
    pub group: BTreeMap<String, String>,
    /// The aggregate over the window.
    pub value: f64,
    /// The condition, e.g. `> 0.05`.
    pub condition: String,
    /// The threshold.
    pub threshold: f64,
    /// Window length and step, e.g. `1m every 10s`.
    pub window: String,
    /// Window start (RFC 3339).
    pub window_start: String,
    /// Window end (RFC 3339, exclusive).
    pub window_end: String,
    /// Events in the window.
    pub events: u64,
    /// First and last event time in the window (RFC 3339).
    pub first_event: Option<String>,
    /// Last event time in the window.
    pub last_event: Option<String>,
    /// Up to five records (`shard/sequence`) that contributed.
    pub sample_records: Vec<String>,
    /// One line for chat tools (Slack-compatible `text`).
    pub text: String,
}

fn rfc3339(ms: i64) -> String {
    Timestamp::from_millis(ms).to_rfc3339()
}

struct RuleState {
    rule: Rule,
    groups: HashMap<Vec<String>, Group>,
    evaluated_through: Option<i64>,
    last_fired: HashMap<Vec<String>, i64>,
}

/// Counts of what the engine did, for metrics and tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EngineStats {
    /// Events counted in windows (summed over rules).
    pub counted: u64,
    /// Events older than an evaluated window end.
    pub late: u64,
    /// Events whose filter or group expression failed.
    pub expression_errors: u64,
}

/// Every rule's windows and alert states.
pub struct Engine {
    rules: Vec<RuleState>,
    lateness: Duration,
    max_event_time: Option<i64>,
    last_event_clock: Option<i64>,
    /// What happened so far.
    pub stats: EngineStats,
}

impl Engine {
    /// An engine for `rules`.
    pub fn new(rules: Vec<Rule>, lateness: Duration) -> Self {
        let rules = rules
            .into_iter()
            .map(|rule| RuleState { rule, groups: HashMap::new(), evaluated_through: None, last_fired: HashMap::new() })
            .collect();
        Self { rules, lateness, max_event_time: None, last_event_clock: None, stats: EngineStats::default() }
    }

    /// Adds an event seen at clock time `now`.
    pub fn ingest(&mut self, e: &Event<'_>, now: Timestamp) {
        let t = e.time.as_millis();
        self.max_event_time = Some(self.max_event_time.map_or(t, |m| m.max(t)));
        self.last_event_clock = Some(now.as_millis());
        for rs in &mut self.rules {
            let rule = &rs.rule;
            if let Some(f) = &rule.filter {
                match f.first(e.value.clone()) {
                    Ok(Some(v)) if truthy(&v) => {}
                    Ok(_) => continue,
                    Err(_) => {
                        self.stats.expression_errors += 1;
                        continue;
                    }
                }
            }
            let mut key = Vec::with_capacity(rule.group_by.len());
            let mut failed = false;
            for g in &rule.group_by {
                match g.first(e.value.clone()) {
                    Ok(Some(v)) => key.push(key_text(&v)),
                    Ok(None) => key.push("null".into()),
                    Err(_) => failed = true,
                }
            }
            if failed {
                self.stats.expression_errors += 1;
                continue;
            }
            if rs.evaluated_through.is_some_and(|through| t < through) {
                self.stats.late += 1;
                continue;
            }
            let step = rule.every.as_millis() as i64;
            let start = t.div_euclid(step) * step;
            let group = rs.groups.entry(key.clone()).or_insert_with(|| Group {
                values: rule.group_by.iter().map(|g| g.source().to_owned()).zip(key.iter().cloned()).collect(),
                ..Group::default()
            });
            let b = group.buckets.entry(start).or_insert_with(|| Bucket::new(t));
            b.count += 1;
            b.first = b.first.min(t);
            b.last = b.last.max(t);
            if e.success == Some(false) {
                b.failures += 1;
            }
            if let Aggregate::ErrorCode(code) = &rule.aggregate
                && e.error_code == Some(code.as_str())
            {
                b.with_code += 1;
            }
            if let Some(d) = e.duration_ms.filter(|d| d.is_finite()) {
                b.durations.add(d);
            }
            if b.samples.len() < 5 {
                b.samples.push(e.id.to_owned());
            }
            self.stats.counted += 1;
        }
    }

    /// The watermark at clock time `now`.
    fn watermark(&self, now: Timestamp) -> Option<i64> {
        let lateness = self.lateness.as_millis() as i64;
        let by_events = self.max_event_time.map(|m| m - lateness);
        let idle_for = self.last_event_clock.map_or(i64::MAX, |c| now.as_millis() - c);
        let longest_window = self.rules.iter().map(|r| r.rule.window.as_millis() as i64).max().unwrap_or(0);
        let by_clock = (idle_for >= longest_window.max(lateness)).then(|| now.as_millis() - lateness);
        match (by_events, by_clock) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// Evaluates every window that closed by `now`; returns alerts and resolutions.
    pub fn tick(&mut self, now: Timestamp) -> Vec<Alert> {
        let Some(watermark) = self.watermark(now) else { return Vec::new() };
        let mut out = Vec::new();
        for rs in &mut self.rules {
            let step = rs.rule.every.as_millis() as i64;
            let window = rs.rule.window.as_millis() as i64;
            let first_end = match rs.evaluated_through {
                Some(t) => t + step,
                None => {
                    let Some(oldest) = rs.groups.values().filter_map(|g| g.buckets.keys().next()).min().copied() else {
                        continue;
                    };
                    oldest + step
                }
            };
            let mut end = first_end;
            while end <= watermark {
                evaluate(rs, end - window, end, &mut out);
                rs.evaluated_through = Some(end);
                end += step;
            }
            // Forget buckets no future window needs, and idle groups.
            if let Some(through) = rs.evaluated_through {
                let keep_from = through + step - window;
                rs.groups.retain(|_, g| {
                    g.buckets.retain(|start, _| *start >= keep_from);
                    !g.buckets.is_empty() || g.firing.is_some()
                });
            }
        }
        out
    }

    /// Open groups (memory).
    pub fn groups(&self) -> usize {
        self.rules.iter().map(|r| r.groups.len()).sum()
    }
}

fn evaluate(rs: &mut RuleState, start: i64, end: i64, out: &mut Vec<Alert>) {
    let rule = &rs.rule;
    for (key, g) in rs.groups.iter_mut() {
        let mut agg: Option<Bucket> = None;
        for (_, b) in g.buckets.range(start..end) {
            match &mut agg {
                None => agg = Some(b.clone()),
                Some(a) => {
                    a.count += b.count;
                    a.failures += b.failures;
                    a.with_code += b.with_code;
                    let _ = a.durations.merge(&b.durations);
                    a.first = a.first.min(b.first);
                    a.last = a.last.max(b.last);
                    a.samples.extend(b.samples.iter().take(5usize.saturating_sub(a.samples.len())).cloned());
                }
            }
        }
        let events = agg.as_ref().map_or(0, |a| a.count);
        let value = match (&rule.aggregate, &agg) {
            (_, None) => 0.0,
            (Aggregate::Count, Some(a)) => a.count as f64,
            (Aggregate::ErrorRate, Some(a)) => a.failures as f64 / a.count.max(1) as f64,
            (Aggregate::ErrorCode(_), Some(a)) => a.with_code as f64,
            (Aggregate::P50, Some(a)) => a.durations.quantile(0.50).ok().flatten().unwrap_or(f64::NAN),
            (Aggregate::P95, Some(a)) => a.durations.quantile(0.95).ok().flatten().unwrap_or(f64::NAN),
            (Aggregate::P99, Some(a)) => a.durations.quantile(0.99).ok().flatten().unwrap_or(f64::NAN),
        };
        let holds = events >= rule.min_events && rule.condition.holds(value);
        let state = match (g.firing, holds) {
            (None, true) => Some("firing"),
            (Some(_), true) => {
                let last = rs.last_fired.get(key).copied().unwrap_or(i64::MIN);
                (end - last >= rule.cooldown.as_millis() as i64).then_some("firing")
            }
            (Some(_), false) => Some("resolved"),
            (None, false) => None,
        };
        let Some(state) = state else { continue };
        if state == "firing" {
            g.firing.get_or_insert(end);
            rs.last_fired.insert(key.clone(), end);
        } else {
            g.firing = None;
            rs.last_fired.remove(key);
        }
        let window = if rule.every == rule.window {
            humantime::format_duration(rule.window).to_string()
        } else {
            format!("{} every {}", humantime::format_duration(rule.window), humantime::format_duration(rule.every))
        };
        let cond = format!("{} {}", rule.condition.op.as_str(), rule.condition.threshold);
        let group_text: Vec<String> = g.values.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let text = format!(
            "[{}] {} {} = {:.4} ({} {}) over {} ending {} ({} events)",
            state.to_uppercase(),
            rule.name,
            group_text.join(" "),
            value,
            rule.aggregate_name(),
            cond,
            window,
            rfc3339(end),
            events
        );
        out.push(Alert {
            rule: rule.name.clone(),
            state,
            group: g.values.clone(),
            value,
            condition: cond,
            threshold: rule.condition.threshold,
            window,
            window_start: rfc3339(start),
            window_end: rfc3339(end),
            events,
            first_event: agg.as_ref().map(|a| rfc3339(a.first)),
            last_event: agg.as_ref().map(|a| rfc3339(a.last)),
            sample_records: agg.map(|a| a.samples).unwrap_or_default(),
            text,
        });
    }
}

impl Rule {
    /// The aggregate's name for messages.
    pub fn aggregate_name(&self) -> String {
        match &self.aggregate {
            Aggregate::Count => "count".into(),
            Aggregate::ErrorRate => "error rate".into(),
            Aggregate::ErrorCode(c) => format!("count of {c}"),
            Aggregate::P50 => "p50 durationMs".into(),
            Aggregate::P95 => "p95 durationMs".into(),
            Aggregate::P99 => "p99 durationMs".into(),
        }
    }
}
