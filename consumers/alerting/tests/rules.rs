//! Rules over windows with explicit times: firing once, repeating after the cooldown,
//! resolving; sliding and tumbling windows; quantiles; minimum events; late events
//! counted and never mis-attributed; groups by several paths.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::time::Duration;

use weir_alerting::engine::{Alert, Engine};
use weir_alerting::event::read;
use weir_alerting::rule::{Aggregate, Rule, RuleConfig};
use weir_core::Timestamp;

const S: i64 = 1000;

fn rule(name: &str, aggregate: Aggregate, condition: &str, window: u64, every: Option<u64>) -> RuleConfig {
    RuleConfig {
        name: name.into(),
        filter: None,
        group_by: vec![".tenantId".into()],
        window: Duration::from_secs(window),
        every: every.map(Duration::from_secs),
        aggregate,
        condition: condition.into(),
        min_events: 5,
        cooldown: Duration::from_secs(60),
    }
}

fn engine(rules: Vec<RuleConfig>) -> Engine {
    Engine::new(rules.iter().map(|r| Rule::compile(r).unwrap()).collect(), Duration::from_secs(2))
}

/// Feeds one event at event time `t` (seconds), seen at clock time `t`.
fn feed(e: &mut Engine, t: i64, json: &str) {
    let f = read(json.as_bytes(), Timestamp::from_millis(t * S), "ts").unwrap();
    let id = format!("shard/{t}");
    e.ingest(&f.event(&id), Timestamp::from_millis(t * S));
}

fn call(t: i64, tenant: &str, ok: bool, ms: u64) -> String {
    format!(r#"{{"tenantId":"{tenant}","toolName":"search","ts":{},"success":{ok},"durationMs":{ms}}}"#, t * S)
}

fn states(alerts: &[Alert]) -> Vec<(String, &'static str, String)> {
    alerts.iter().map(|a| (a.group[".tenantId"].clone(), a.state, a.window_end.clone())).collect()
}

#[test]
fn fires_once_repeats_after_the_cooldown_and_resolves() {
    let mut e = engine(vec![rule("errors", Aggregate::ErrorRate, "> 0.05", 60, Some(10))]);
    let mut alerts = Vec::new();
    // Healthy for a minute, then 50% errors for t-bad for two minutes, then healthy.
    for t in 0..300 {
        let bad = (60..180).contains(&t);
        feed(&mut e, t, &call(t, "t-bad", !(bad && t % 2 == 0), 10));
        feed(&mut e, t, &call(t, "t-good", true, 10));
        alerts.extend(e.tick(Timestamp::from_millis((t + 1) * S)));
    }
    let got = states(&alerts);
    assert!(got.iter().all(|(g, _, _)| g == "t-bad"), "{got:?}");
    let firing: Vec<_> = got.iter().filter(|(_, s, _)| *s == "firing").collect();
    let resolved: Vec<_> = got.iter().filter(|(_, s, _)| *s == "resolved").collect();
    // The first window with errors ends at 70 s; then repeats every 60 s while it holds
    // (windows ending up to 230 s still hold errors), then one resolution.
    assert_eq!(firing.first().unwrap().2, "1970-01-01T00:01:10.000Z", "{got:?}");
    assert_eq!(firing.len(), 3, "fires at 70 s, repeats at 130 s and 190 s: {got:?}");
    assert_eq!(resolved.len(), 1, "{got:?}");
    assert_eq!(resolved[0].2, "1970-01-01T00:04:00.000Z", "the first window without errors ends at 240 s");
    let a = alerts.iter().find(|a| a.state == "firing").unwrap();
    assert!(a.value > 0.05 && a.events >= 5 && !a.sample_records.is_empty(), "{a:?}");
    assert!(a.text.contains("[FIRING] errors .tenantId=t-bad"), "{}", a.text);
}

#[test]
fn minimum_events_gate_small_windows() {
    let mut e = engine(vec![rule("errors", Aggregate::ErrorRate, "> 0.5", 10, None)]);
    for t in 0..4 {
        feed(&mut e, t, &call(t, "a", false, 1));
    }
    assert!(e.tick(Timestamp::from_millis(30 * S)).is_empty(), "4 events < min_events 5");
}

#[test]
fn tumbling_counts_and_error_codes() {
    let mut codes = rule("timeouts", Aggregate::ErrorCode("E_TIMEOUT".into()), ">= 3", 10, None);
    codes.min_events = 1;
    let mut e = engine(vec![codes]);
    for t in 0..10 {
        let code = if t < 3 { r#""E_TIMEOUT""# } else { "null" };
        feed(&mut e, t, &format!(r#"{{"tenantId":"a","ts":{},"success":false,"errorCode":{code}}}"#, t * S));
    }
    assert!(e.tick(Timestamp::from_millis(13 * S)).is_empty(), "no later event and not idle for a window yet");
    let alerts = e.tick(Timestamp::from_millis(20 * S));
    assert_eq!(alerts.len(), 1, "idle for a window: the clock closes it");
    assert_eq!((alerts[0].value, alerts[0].window.as_str()), (3.0, "10s"));
}

#[test]
fn p95_latency_from_the_sketch() {
    let mut e = engine(vec![rule("slow", Aggregate::P95, "> 800", 60, Some(60))]);
    for i in 0..100 {
        let ms = if i < 90 { 100 } else { 2000 };
        feed(&mut e, i / 2, &call(i / 2, "a", true, ms));
    }
    let alerts = e.tick(Timestamp::from_millis(110 * S));
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert!((alerts[0].value - 2000.0).abs() / 2000.0 < 0.02, "p95 within the sketch's 1% error: {}", alerts[0].value);
}

#[test]
fn late_events_are_counted_not_added() {
    let mut c = rule("count", Aggregate::Count, ">= 5", 10, None);
    c.min_events = 1;
    let mut e = engine(vec![c]);
    for t in 0..5 {
        feed(&mut e, t, &call(t, "a", true, 1));
    }
    feed(&mut e, 14, &call(14, "a", true, 1));
    assert_eq!(e.tick(Timestamp::from_millis(14 * S)).len(), 1, "the window [0, 10) closed at watermark 12 s");
    // An event for the closed window arrives now: late, not counted in [10, 20).
    feed(&mut e, 15, &call(3, "a", true, 1));
    assert_eq!(e.stats.late, 1);
    feed(&mut e, 30, &call(30, "a", true, 1));
    let next = e.tick(Timestamp::from_millis(30 * S));
    assert!(
        next.iter().all(|a| a.state == "resolved" && a.events == 1),
        "[10, 20) holds only the event at 14 s: {next:?}"
    );
}

#[test]
fn groups_by_several_paths_and_filters() {
    let mut c = rule("tool-errors", Aggregate::Count, ">= 2", 10, None);
    c.group_by = vec![".tenantId".into(), ".toolName".into()];
    c.filter = Some(".success == false".into());
    c.min_events = 2;
    let mut e = engine(vec![c]);
    for (t, tool, ok) in [(0, "x", false), (1, "x", false), (2, "y", false), (3, "y", true), (4, "y", true)] {
        feed(&mut e, t, &format!(r#"{{"tenantId":"a","toolName":"{tool}","ts":{},"success":{ok}}}"#, t * S));
    }
    feed(&mut e, 13, &call(13, "a", true, 1));
    let alerts = e.tick(Timestamp::from_millis(13 * S));
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0].group[".toolName"], "x");
}

#[test]
fn idle_streams_resolve_by_the_clock() {
    let mut e = engine(vec![rule("errors", Aggregate::ErrorRate, "> 0.1", 10, None)]);
    for t in 0..10 {
        feed(&mut e, t, &call(t, "a", false, 1));
    }
    assert!(e.tick(Timestamp::from_millis(11 * S)).is_empty(), "watermark 8 s: not closed yet");
    let fired = e.tick(Timestamp::from_millis(40 * S));
    assert_eq!(states(&fired).iter().map(|s| s.1).collect::<Vec<_>>(), vec!["firing", "resolved"], "{fired:?}");
    assert_eq!(e.groups(), 0, "idle groups are forgotten");
}
