//! `type = "enrichment"`: normalise, look up, republish (fields:
//! `weir_enrichment::EnrichmentConfig`).

use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use weir_core::ports::{ObjectSink, StreamWriter};
use weir_enrichment::{Enricher, EnrichmentConfig, OutputConfig};

use crate::plugin::{Context, Plugin};

impl Plugin for Enricher {
    type Config = EnrichmentConfig;
    const ABOUT: &'static str = "normalise, look up and republish to a stream or file";

    fn check(e: &EnrichmentConfig, at: &str) -> Result<Vec<String>> {
        e.check().map_err(|e| anyhow::anyhow!("field `{at}`: {e}"))?;
        if matches!(e.output, OutputConfig::None) {
            bail!("field `{at}.output`: needs type = \"kinesis\" (stream) or \"file\" (path)");
        }
        if let Some(l) = &e.lookup {
            Context::store_location(&format!("{at}.lookup"), l.directory.as_deref(), l.bucket.as_deref())?;
        }
        Ok(Vec::new())
    }

    async fn build(mut e: EnrichmentConfig, ctx: &Context) -> Result<Self> {
        e.name = ctx.name().to_owned();
        let at = ctx.at();
        let output: Arc<dyn StreamWriter> = match &e.output {
            OutputConfig::File { path } => Arc::new(
                weir_local::NdjsonFileWriter::open(path)
                    .with_context(|| format!("{at}.output.path {}", path.display()))?,
            ),
            OutputConfig::Kinesis { stream } => ctx.kinesis_writer(stream).await,
            OutputConfig::None => bail!("{at}.output: not configured"),
        };
        let store: Option<Arc<dyn ObjectSink>> = match &e.lookup {
            None => None,
            Some(l) => {
                let field = format!("{at}.lookup");
                let location = Context::store_location(&field, l.directory.as_deref(), l.bucket.as_deref())?;
                Some(ctx.object_sink(&field, &location).await?)
            }
        };
        Ok(Enricher::new(e, output, store, ctx.clock())?)
    }
}
