//! `weir health`: asks a worker's `/readyz` (or any endpoint) and exits 0 on a 2xx
//! answer, 1 otherwise. The image's `HEALTHCHECK` uses it, so the image needs no curl.

use std::time::Duration;

use anyhow::{Context, Result, bail};

/// `weir health` arguments.
#[derive(Debug, clap::Args)]
pub struct HealthArgs {
    /// The endpoint to ask.
    #[arg(long, default_value = "http://127.0.0.1:9090/readyz", env = "WEIR_HEALTH_URL")]
    pub url: String,
    /// Give up after this long (e.g. `3s`).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// Prints the answer's body; fails (exit 1) unless the status is 2xx.
pub async fn run(args: HealthArgs) -> Result<()> {
    let client = reqwest::Client::builder().timeout(args.timeout).build().context("cannot build an HTTP client")?;
    let response = client.get(&args.url).send().await.with_context(|| format!("{} did not answer", args.url))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    print!("{body}");
    if !status.is_success() {
        bail!("{} answered {status}", args.url);
    }
    Ok(())
}
