//! `type = "alerting"`: windowed alert rules (fields: `weir_alerting::AlertingConfig`).

use anyhow::Result;
use weir_alerting::{Alerting, AlertingConfig, SinkConfig};

use crate::plugin::{Context, Plugin};

impl Plugin for Alerting {
    type Config = AlertingConfig;
    const ABOUT: &'static str = "windowed alert rules to log, webhook, SNS or file sinks";

    fn check(c: &AlertingConfig, at: &str) -> Result<Vec<String>> {
        c.rules().map_err(|e| anyhow::anyhow!("field `{at}`: {e}"))?;
        Ok(Vec::new())
    }

    async fn build(mut c: AlertingConfig, ctx: &Context) -> Result<Self> {
        c.name = ctx.name().to_owned();
        let publisher = if c.sinks.iter().any(|s| matches!(s, SinkConfig::Sns { .. })) {
            Some(ctx.publisher().await)
        } else {
            None
        };
        Ok(Alerting::new(&c, ctx.clock(), publisher)?)
    }
}
