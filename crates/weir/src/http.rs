//! `/metrics` (Prometheus), `/healthz` (the process is up), `/readyz` (every worker
//! completed a lease cycle and nothing has been failing for `[worker] unhealthy_after`:
//! no shard's reads, no lease cycle, no lease renewal, no consumer of a held shard; 503
//! with the problems otherwise; the body also shows each archiver's backlog) and
//! `/status` (JSON for `weir doctor`: held shards, reads, detached consumers, errors).

use std::net::SocketAddr;
use std::sync::Arc;

use crate::plugin::StatusLine;
use crate::status::WorkerView;
use anyhow::{Context, Result};
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct AppState {
    metrics: PrometheusHandle,
    workers: Arc<Vec<WorkerView>>,
    status: Arc<Vec<StatusLine>>,
}

/// Installs the Prometheus recorder (once per process).
pub fn install_recorder() -> Result<PrometheusHandle> {
    PrometheusBuilder::new().install_recorder().context("cannot install the metrics recorder")
}

/// Installs the Prometheus recorder and, beside it, the CloudWatch one (once per
/// process): every metric goes to both.
pub fn install_recorders(cloudwatch: crate::cloudwatch::EmfRecorder) -> Result<PrometheusHandle> {
    let prometheus = PrometheusBuilder::new().build_recorder();
    let handle = prometheus.handle();
    let fanout =
        metrics_util::layers::FanoutBuilder::default().add_recorder(prometheus).add_recorder(cloudwatch).build();
    metrics::set_global_recorder(fanout).map_err(|e| anyhow::anyhow!("cannot install the metrics recorder: {e}"))?;
    Ok(handle)
}

/// How long open HTTP connections may finish after shutdown starts.
const DRAIN_CONNECTIONS: std::time::Duration = std::time::Duration::from_secs(2);

/// Serves the endpoints until `shutdown`; connections still open
/// [`DRAIN_CONNECTIONS`] later are closed. Each connection is its own task: slow or
/// stuck clients hold neither the other requests nor the worker.
pub async fn serve(
    addr: SocketAddr,
    metrics: PrometheusHandle,
    workers: Vec<WorkerView>,
    status: Vec<StatusLine>,
    shutdown: CancellationToken,
) -> Result<JoinHandle<()>> {
    let state = AppState { metrics, workers: Arc::new(workers), status: Arc::new(status) };
    let app = Router::new()
        .route("/metrics", get(|State(s): State<AppState>| async move { render_metrics(&s.metrics, &s.workers) }))
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(|State(s): State<AppState>| async move {
                let mut body = String::new();
                for line in s.status.iter() {
                    body.push_str(&line());
                    body.push('\n');
                }
                let problems: Vec<String> = s
                    .workers
                    .iter()
                    .flat_map(|w| w.health().problems.into_iter().map(|p| format!("{}: {p}", w.id)))
                    .collect();
                if problems.is_empty() {
                    (StatusCode::OK, format!("ready\n{body}"))
                } else {
                    // The first word says which: `starting` before the first lease cycle.
                    let first = if s.workers.iter().all(|w| w.stats.is_ready()) { "unhealthy" } else { "starting" };
                    (StatusCode::SERVICE_UNAVAILABLE, format!("{first}\n{}\n{body}", problems.join("\n")))
                }
            }),
        )
        .route(
            "/status",
            get(|State(s): State<AppState>| async move {
                let report: Vec<_> = s.workers.iter().map(crate::status::report).collect();
                let body = serde_json::to_string_pretty(&report).unwrap_or_default();
                ([(axum::http::header::CONTENT_TYPE, "application/json")], body)
            }),
        )
        .with_state(state);
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr} (http.listen)"))?;
    // With port 0 the system chose one: say which.
    let addr = listener.local_addr().unwrap_or(addr);
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz, /status");
    Ok(tokio::spawn(async move {
        use std::future::IntoFuture;
        let served = axum::serve(listener, app).with_graceful_shutdown(shutdown.clone().cancelled_owned());
        // Graceful shutdown waits for open connections, and a client that never
        // finishes its request would keep the process alive after the worker drained:
        // they get DRAIN_CONNECTIONS, then are closed.
        let deadline = async {
            shutdown.cancelled().await;
            tokio::time::sleep(DRAIN_CONNECTIONS).await;
        };
        tokio::select! {
            served = served.into_future() => {
                if let Err(e) = served {
                    tracing::error!(error = %e, "http server failed");
                }
            }
            _ = deadline => tracing::info!("closed http connections still open at shutdown"),
        }
    }))
}

/// The recorded metrics, with the process's live tokio task count set first
/// (`weir_runtime_alive_tasks`: flat in a healthy worker; the soak test watches it),
/// then the workers' live gauges (lag of the shards read now, failing reads).
fn render_metrics(handle: &PrometheusHandle, workers: &[WorkerView]) -> String {
    let alive = tokio::runtime::Handle::current().metrics().num_alive_tasks();
    metrics::gauge!("weir_runtime_alive_tasks").set(alive as f64);
    let mut text = handle.render();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&crate::live_gauges::LiveGauges::of(workers).prometheus());
    text
}
