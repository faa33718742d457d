//! Synthetic MCP tool-call events.
//!
//! Each event is one JSON object per tool call, for example
//! `{"tenantId":"t-007","toolName":"search_docs","sessionId":"s-…","ts":1764400000000,
//! "durationMs":412,"success":false,"errorCode":"E_TIMEOUT"}`. The partition key is the
//! tenant id, so one tenant's events stay in one shard. A configurable share of records
//! is malformed (not JSON, truncated, wrong types, missing fields, invalid UTF-8) for
//! consumers to route to their error outputs.

use bytes::Bytes;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use weir_core::Timestamp;

const TOOLS: &[&str] = &[
    "search_docs",
    "read_file",
    "write_file",
    "run_query",
    "fetch_url",
    "list_issues",
    "create_ticket",
    "summarize",
    "translate",
    "send_email",
];
const ERRORS: &[&str] = &["E_TIMEOUT", "E_RATE_LIMITED", "E_UPSTREAM", "E_INVALID_ARGS", "E_AUTH"];

/// Shape of the generated traffic.
#[derive(Debug, Clone)]
pub struct GeneratorConfig {
    /// Number of tenants (`t-000` …).
    pub tenants: u32,
    /// Number of tools used (at most 10 distinct names).
    pub tools: u32,
    /// Share of calls that fail (0.0–1.0).
    pub error_rate: f64,
    /// Share of records that are malformed (0.0–1.0).
    pub malformed_rate: f64,
    /// Median call duration in milliseconds.
    pub median_duration_ms: u32,
    /// RNG seed, for reproducible runs.
    pub seed: u64,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        Self { tenants: 20, tools: 8, error_rate: 0.02, malformed_rate: 0.001, median_duration_ms: 120, seed: 7 }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Event<'a> {
    tenant_id: &'a str,
    tool_name: &'a str,
    session_id: &'a str,
    ts: i64,
    duration_ms: u32,
    success: bool,
    error_code: Option<&'a str>,
}

/// Generates events; deterministic for a given seed.
#[derive(Debug)]
pub struct McpEventGenerator {
    config: GeneratorConfig,
    rng: SmallRng,
    hot_tenant: Option<(u32, f64)>,
    sessions: Vec<String>,
}

impl McpEventGenerator {
    /// A generator with `config`.
    pub fn new(config: GeneratorConfig) -> Self {
        let mut rng = SmallRng::seed_from_u64(config.seed);
        let sessions = (0..64).map(|_| format!("s-{:016x}", rng.random::<u64>())).collect();
        Self { config, rng, hot_tenant: None, sessions }
    }

    /// From now on tenant `tenant` fails with `error_rate` (the demo's incident).
    pub fn set_hot_tenant(&mut self, tenant: u32, error_rate: f64) {
        self.hot_tenant = Some((tenant, error_rate));
    }

    /// Tenant id for an index: `t-007`.
    pub fn tenant_id(index: u32) -> String {
        format!("t-{index:03}")
    }

    /// The next event at time `now`: (partition key, payload).
    pub fn next_event(&mut self, now: Timestamp) -> (String, Bytes) {
        let tenant = self.rng.random_range(0..self.config.tenants.max(1));
        let tenant_id = Self::tenant_id(tenant);
        if self.rng.random_bool(self.config.malformed_rate.clamp(0.0, 1.0)) {
            let payload = self.malformed(&tenant_id);
            return (tenant_id, payload);
        }
        let tools = self.config.tools.clamp(1, TOOLS.len() as u32) as usize;
        let tool = TOOLS[self.rng.random_range(0..tools)];
        let error_rate = match self.hot_tenant {
            Some((t, rate)) if t == tenant => rate,
            _ => self.config.error_rate,
        };
        let success = !self.rng.random_bool(error_rate.clamp(0.0, 1.0));
        // Log-normal-ish durations: median times a factor between 1/4 and 8.
        let factor = 2f64.powf(self.rng.random_range(-2.0..3.0));
        let duration_ms = ((self.config.median_duration_ms as f64) * factor) as u32;
        let session = &self.sessions[self.rng.random_range(0..self.sessions.len())];
        let event = Event {
            tenant_id: &tenant_id,
            tool_name: tool,
            session_id: session,
            ts: now.as_millis(),
            duration_ms,
            success,
            error_code: (!success).then(|| ERRORS[self.rng.random_range(0..ERRORS.len())]),
        };
        let json = serde_json::to_vec(&event).unwrap_or_default();
        (tenant_id, Bytes::from(json))
    }

    fn malformed(&mut self, tenant_id: &str) -> Bytes {
        match self.rng.random_range(0..5) {
            0 => Bytes::from_static(b"not json at all"),
            1 => Bytes::from(format!("{{\"tenantId\":\"{tenant_id}\",\"toolName\":\"trunc")),
            2 => Bytes::from(format!("{{\"tenantId\":\"{tenant_id}\",\"durationMs\":\"slow\",\"success\":\"maybe\"}}")),
            3 => Bytes::from_static(b"{\"toolName\":\"search_docs\"}"),
            _ => Bytes::from_static(&[0xff, 0xfe, b'{', 0x80, b'}']),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_json_with_the_mcp_fields() {
        let mut g = McpEventGenerator::new(GeneratorConfig { malformed_rate: 0.0, ..Default::default() });
        for _ in 0..200 {
            let (pk, data) = g.next_event(Timestamp::from_millis(1_764_400_000_000));
            let v: serde_json::Value = serde_json::from_slice(&data).unwrap();
            assert_eq!(v["tenantId"], pk.as_str());
            assert_eq!(v["ts"], 1_764_400_000_000i64);
            for f in ["toolName", "sessionId", "durationMs", "success"] {
                assert!(v.get(f).is_some(), "missing {f}");
            }
            assert_eq!(v["success"].as_bool().unwrap(), v["errorCode"].is_null());
        }
    }

    #[test]
    fn malformed_share_and_hot_tenant() {
        let mut g = McpEventGenerator::new(GeneratorConfig {
            malformed_rate: 0.1,
            tenants: 2,
            error_rate: 0.0,
            ..Default::default()
        });
        g.set_hot_tenant(1, 1.0);
        let mut bad = 0;
        let mut hot_failures = 0;
        for _ in 0..5_000 {
            let (pk, data) = g.next_event(Timestamp::from_millis(0));
            match serde_json::from_slice::<serde_json::Value>(&data) {
                Ok(v) if v.get("success").and_then(|s| s.as_bool()).is_some() => {
                    let ok = v["success"].as_bool().unwrap();
                    if pk == "t-001" {
                        assert!(!ok);
                        hot_failures += 1
                    } else {
                        assert!(ok)
                    }
                }
                _ => bad += 1,
            }
        }
        assert!((300..700).contains(&bad), "malformed share off: {bad}");
        assert!(hot_failures > 1_000);
    }
}
