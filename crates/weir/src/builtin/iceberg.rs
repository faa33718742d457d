//! `type = "iceberg"`: records appended to an Iceberg table exactly once (fields:
//! `weir_iceberg::IcebergConfig`).

use anyhow::{Context as _, Result, bail};
use iceberg::{ErrorKind, NamespaceIdent, TableIdent};
use std::sync::Arc;

use weir_archiver::{LambdaTransform, Outcome, Part};
use weir_core::{Record, ShardId};
use weir_firehose::LambdaSettings;
use weir_iceberg::{
    CatalogConfig, IcebergConfig, IcebergConsumer, RecordTransform, Route, RouteQuery, TableWriter, Tables, Transformed,
};

use crate::plugin::{Context, Plugin};

/// Firehose's Lambda processor in front of the tables: the archiver's invocation
/// (event, payload size, retries, the response checked record by record) with each
/// answer's `otfMetadata` as the record's table.
struct Lambda(LambdaTransform);

impl std::fmt::Debug for Lambda {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Lambda").field(&self.0.redacted_arn()).finish()
    }
}

#[async_trait::async_trait]
impl RecordTransform for Lambda {
    async fn transform(&self, shard: &ShardId, records: &[Record]) -> Vec<Transformed> {
        let parts: Vec<Part<'_>> = records.iter().map(Part::whole).collect();
        let lambda_arn = self.0.redacted_arn();
        self.0
            .run(shard, &parts)
            .await
            .into_iter()
            .map(|o| match o {
                Outcome::Ok { data, otf, .. } => Transformed::Ok {
                    data,
                    route: otf.map(|o| Route {
                        database: o.destination_database_name,
                        table: o.destination_table_name,
                        operation: o.operation,
                    }),
                },
                Outcome::Dropped => Transformed::Dropped,
                Outcome::Failed(f) => {
                    Transformed::Failed { code: f.code, reason: format!("{} ({lambda_arn})", f.message) }
                }
            })
            .collect()
    }
}

impl Plugin for IcebergConsumer {
    type Config = IcebergConfig;
    const ABOUT: &'static str = "append records to an Iceberg table, exactly once";

    fn check(c: &IcebergConfig, at: &str) -> Result<Vec<String>> {
        let r = c.resolve(at).map_err(|problems| anyhow::anyhow!("{}", problems.join("\n")))?;
        let e = &r.error_output;
        Context::store_location(&format!("{at}.error_output"), e.directory.as_deref(), e.bucket.as_deref())?;
        Ok(r.warnings.iter().map(|w| format!("{at}.destination.{w}")).collect())
    }

    async fn build(c: IcebergConfig, ctx: &Context) -> Result<Self> {
        let at = ctx.at();
        Self::check(&c, at)?;
        let (mode, integers) = (c.mode, c.timestamp_integers.into());
        let c = c.resolve(at).map_err(|problems| anyhow::anyhow!("{}", problems.join("\n")))?;
        let catalog = match &c.catalog {
            CatalogConfig::Sql { database, warehouse, catalog_name } => {
                let database = std::path::absolute(database)?;
                let warehouse = std::path::absolute(warehouse)?;
                if let Some(parent) = database.parent() {
                    std::fs::create_dir_all(parent).with_context(|| format!("{at}.catalog.database"))?;
                }
                std::fs::create_dir_all(&warehouse).with_context(|| format!("{at}.catalog.warehouse"))?;
                weir_local::sql_catalog(catalog_name, &database, &warehouse)
                    .await
                    .with_context(|| format!("{at}.catalog"))?
            }
            CatalogConfig::Glue { catalog_arn } => {
                let arn = catalog_arn
                    .as_deref()
                    .map(weir_iceberg::firehose::catalog_arn)
                    .transpose()
                    .map_err(|why| anyhow::anyhow!("field `{at}.catalog.catalog_arn`: {why}"))?;
                let (account, region) = match &arn {
                    Some(a) => (Some(a.account().to_owned()), Some(a.region())),
                    None => (None, None),
                };
                ctx.aws_clients().iceberg_glue(account, region).await
            }
            CatalogConfig::S3tables { table_bucket_arn } => {
                let (region, _) = weir_iceberg::firehose::table_bucket(table_bucket_arn)
                    .map_err(|why| anyhow::anyhow!("field `{at}.catalog.table_bucket_arn`: {why}"))?;
                ctx.aws_clients().iceberg_s3tables(table_bucket_arn, &region).await
            }
            CatalogConfig::Rest { uri, warehouse, credential_env, token_env, properties } => {
                let secret = |field: &str, var: &Option<String>| match var {
                    None => Ok(None),
                    Some(var) => std::env::var(var)
                        .map(Some)
                        .with_context(|| format!("field `{at}.catalog.{field}`: environment variable {var}")),
                };
                let settings = weir_aws::iceberg_rest::RestSettings {
                    uri: uri.clone(),
                    warehouse: warehouse.clone(),
                    credential: secret("credential_env", credential_env)?,
                    token: secret("token_env", token_env)?,
                    properties: properties.clone().into_iter().collect(),
                };
                ctx.aws_clients().iceberg_rest(settings).await.with_context(|| format!("field `{at}.catalog`"))?
            }
        };
        // The configured table (a routed consumer's default) must exist and be
        // writable: a worker refuses to start otherwise, naming the field. A catalog
        // that cannot be reached now is an outage, not a mistake: the worker starts, and
        // the table is checked by its first commit.
        let default = match c.table.as_deref().and_then(|t| t.rsplit_once('.')) {
            Some((namespace, name)) => {
                let table = TableIdent::new(NamespaceIdent::from_strs(namespace.split('.'))?, name.to_owned());
                match catalog.load_table(&table).await {
                    Ok(loaded) => {
                        weir_iceberg::schema::columns(loaded.metadata().current_schema())
                            .with_context(|| format!("field `{at}.table`: {table}"))?;
                        weir_iceberg::file_properties::file_properties(loaded.metadata().properties())
                            .with_context(|| format!("field `{at}.table`: {table}"))?;
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::Unexpected) => tracing::warn!(
                        consumer = %ctx.name(), %table, error = %e,
                        "the catalog cannot be reached: starting anyway, the table is checked at its first commit"
                    ),
                    Err(e) => return Err(e).with_context(|| format!("field `{at}.table`: cannot load {table}")),
                }
                Some(table)
            }
            None => None,
        };
        let e = &c.error_output;
        let field = format!("{at}.error_output");
        let location = Context::store_location(&field, e.directory.as_deref(), e.bucket.as_deref())?;
        let errors = ctx.object_sink(&field, &location).await?;
        // A replay reads the live shards again from an earlier position: its positions
        // in the table are its own (`<name>-replay-<job>`), or it would find the live
        // consumer's and skip the whole window.
        let positions = match ctx.replay_job() {
            Some(job) => format!("{}-replay-{job}", ctx.name()),
            None => ctx.name().to_owned(),
        };
        let tables = match (&c.route_query, default, &c.lambda) {
            (None, Some(table), None) => Tables::single(
                TableWriter::new(catalog, table, positions).with_delivery(mode).with_epoch_integers(integers),
            ),
            (None, None, None) => bail!("field `{at}.table`: give `table`, `route_query`, `lambda`, or several"),
            (query, default, _) => {
                let query = query
                    .as_deref()
                    .map(RouteQuery::compile)
                    .transpose()
                    .with_context(|| format!("field `{at}.route_query`"))?;
                // The template's table is never written: each record's table is the
                // one its Lambda or the query names (or the default, then its own).
                let template =
                    default.clone().unwrap_or_else(|| TableIdent::new(NamespaceIdent::new("-".into()), "-".into()));
                let writer =
                    TableWriter::new(catalog, template, positions).with_delivery(mode).with_epoch_integers(integers);
                Tables::routed(writer, query, default)
            }
        };
        let mut consumer = IcebergConsumer::new(ctx.name(), tables, errors, e.prefix.clone(), c.hints);
        if let Some(l) = &c.lambda {
            let invoker = ctx.function_invoker().await;
            let transform = LambdaTransform {
                invoker,
                settings: LambdaSettings {
                    arn: l.arn.clone(),
                    retries: l.retries,
                    buffer_bytes: (l.buffer_size_mib * 1024.0 * 1024.0) as u64,
                    buffer_interval: std::time::Duration::from_secs(60),
                },
                delivery_arn: format!("arn:weir:iceberg:{}", ctx.name()),
                source_arn: ctx.stream_arn().await,
                region: ctx.region().await,
            };
            consumer = consumer.with_transform(Arc::new(Lambda(transform)));
        }
        let (status, clock, name) = (consumer.status(), ctx.clock(), ctx.name().to_owned());
        ctx.status_line(move || status.line(&name, clock.now()));
        Ok(consumer)
    }
}
