//! `weir run`: one worker wired from the config file, until a signal (or, with
//! `--until-caught-up`, until every shard is read to the tip).

use std::sync::Arc;

use weir_core::Clock;

use anyhow::Result;

use crate::config::Config;
use crate::plugin::Registry;
use tokio_util::sync::CancellationToken;
use weir_local::GeneratorConfig;
use weir_runtime::{TokioClock, Worker};

use crate::wiring::{build_env, cancel_on_signal, default_worker_id, only_their_streams, spawn_generator, wire};

/// Runs the worker `config` describes with the consumer kinds of `registry`.
pub async fn run(config: Config, until_caught_up: bool, registry: &Registry) -> Result<()> {
    let worker_id = config.worker.id.clone().unwrap_or_else(default_worker_id);
    let clock = Arc::new(TokioClock::new());
    let config = if config.streams.len() == 1 { config.with_one_stream(None)? } else { config };
    let wired = wire(&config, clock.clone()).await?;
    let catch_up = until_caught_up.then(|| crate::catch_up::CatchUp {
        table: wired.table.clone(),
        catalog: wired.catalog.clone(),
        me: weir_core::WorkerId::new(worker_id.as_str()),
        consumers: config.consumers.iter().map(|c| weir_core::ConsumerName::new(c.name())).collect(),
        started: tokio::time::Instant::now(),
        started_at: clock.now(),
    });
    let built = registry.build(&config.consumers, &build_env(&config, &worker_id, clock.clone())).await?;
    let status = built.status.clone();
    let consumers = match &wired.streams {
        None => built.consumers,
        Some(streams) => only_their_streams(built.consumers, &config, streams),
    };
    let worker = Worker::new(config.runtime(&worker_id), wired.table, wired.reader, wired.catalog, consumers, clock)?;
    let shutdown = CancellationToken::new();
    cancel_on_signal(shutdown.clone());
    // The CloudWatch writer stops after the worker, so its last line has the final values.
    let metrics_stop = CancellationToken::new();
    let view = crate::status::WorkerView {
        id: worker_id.clone(),
        read: config.read_kind().to_owned(),
        stats: worker.stats(),
        unhealthy_after: config.worker.unhealthy_after,
    };
    let (metrics, cloudwatch) = if config.metrics.cloudwatch {
        let recorder = crate::cloudwatch::EmfRecorder::default();
        let writer = crate::cloudwatch::EmfWriter::new(
            recorder.clone(),
            &config.metrics.namespace,
            &config.leases.namespace,
            &worker_id,
        )
        .with_workers(vec![view.clone()]);
        let metrics = crate::http::install_recorders(recorder)?;
        (Some(metrics), Some(crate::cloudwatch::spawn(writer, config.metrics.interval, metrics_stop.clone())))
    } else if config.http.listen.is_some() {
        (Some(crate::http::install_recorder()?), None)
    } else {
        (None, None)
    };
    let http = match (config.http.listen, metrics) {
        (Some(addr), Some(metrics)) => {
            Some(crate::http::serve(addr, metrics, vec![view], status, shutdown.clone()).await?)
        }
        _ => None,
    };
    let producers: Vec<_> = wired
        .memory
        .into_iter()
        .map(|stream| {
            let generator = GeneratorConfig {
                tenants: config.generator.tenants,
                error_rate: config.generator.error_rate,
                malformed_rate: config.generator.malformed_rate,
                ..GeneratorConfig::default()
            };
            spawn_generator(stream, generator, config.generator.rate, None, None, shutdown.clone())
        })
        .collect();
    tracing::info!(
        worker = %worker_id,
        reading = %config.describe_stream(true),
        leases = %config.leases.describe(),
        consumers = %config.consumers.iter().map(|c| c.name()).collect::<Vec<_>>().join(", "),
        "weir running; SIGTERM or Ctrl-C to stop"
    );
    let caught_up = catch_up.map(|c| tokio::spawn(c.stop_when_done(worker.stats(), shutdown.clone())));
    worker.run(shutdown).await?;
    // The worker stopped, so `shutdown` is cancelled and the watcher has returned.
    if let Some(c) = caught_up
        && let Ok(Some(records)) = c.await
    {
        // A closed stdout (`| head`) is no failure: the work is done.
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "caught up: every shard read to the start ({records} records processed), checkpoints written"
        );
        if let Some(requests) = weir_aws::clients::summary() {
            let _ = writeln!(out, "{requests}");
        }
    }
    for p in producers {
        let sent = p.await.unwrap_or(0);
        tracing::info!(records_generated = sent, "generator stopped");
    }
    if let Some(h) = http {
        let _ = h.await;
    }
    metrics_stop.cancel();
    if let Some(c) = cloudwatch {
        let _ = c.await;
    }
    tracing::info!("stopped");
    Ok(())
}
