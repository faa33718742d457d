//! A built consumer under its config's name: `[[consumers]] name` keys its
//! checkpoints, so the registry assigns it rather than trusting each plugin to return
//! [`Context::name`](super::Context::name) from [`Consumer::name`].

use async_trait::async_trait;
use weir_core::{Acks, CloseReason, Consumer, ConsumerError, Intent, RecordBatch, ShardContext, ShardId, Timestamp};

/// `inner`, known as `name`; every other call goes to `inner` unchanged.
pub(crate) struct Named {
    name: String,
    inner: Box<dyn Consumer>,
}

impl Named {
    /// `inner` under `name`.
    pub(crate) fn new(name: String, inner: Box<dyn Consumer>) -> Self {
        Self { name, inner }
    }
}

#[async_trait]
impl Consumer for Named {
    fn name(&self) -> &str {
        &self.name
    }

    async fn on_shard_open(&mut self, shard: &ShardContext) -> Result<(), ConsumerError> {
        self.inner.on_shard_open(shard).await
    }

    async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
        self.inner.on_batch(batch, acks).await
    }

    async fn on_tick(&mut self, now: Timestamp, acks: &dyn Acks) -> Result<(), ConsumerError> {
        self.inner.on_tick(now, acks).await
    }

    async fn on_shard_close(
        &mut self,
        shard: &ShardId,
        reason: CloseReason,
        acks: &dyn Acks,
    ) -> Result<(), ConsumerError> {
        self.inner.on_shard_close(shard, reason, acks).await
    }

    async fn on_intents_passed(&mut self, shard: &ShardId, intents: &[Intent]) -> Result<(), ConsumerError> {
        self.inner.on_intents_passed(shard, intents).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::ConsumerEntry;
    use crate::plugin::{BuildEnv, Context, Plugin, Registry};
    use weir_runtime::consumers::CountConsumer;

    /// A plugin whose consumer calls itself something else than its config's name.
    struct SelfNamed(CountConsumer);

    #[async_trait]
    impl Consumer for SelfNamed {
        fn name(&self) -> &str {
            "what-it-calls-itself"
        }
        async fn on_batch(&mut self, batch: &RecordBatch, acks: &dyn Acks) -> Result<(), ConsumerError> {
            self.0.on_batch(batch, acks).await
        }
        async fn on_shard_close(&mut self, s: &ShardId, r: CloseReason, a: &dyn Acks) -> Result<(), ConsumerError> {
            self.0.on_shard_close(s, r, a).await
        }
    }

    impl Plugin for SelfNamed {
        type Config = serde_json::Value;
        async fn build(_: serde_json::Value, ctx: &Context) -> anyhow::Result<Self> {
            Ok(Self(CountConsumer::new(ctx.name()).0))
        }
    }

    #[tokio::test]
    async fn a_built_consumer_takes_its_config_name() {
        let mut registry = Registry::default();
        registry.register::<SelfNamed>("self-named");
        let entry = ConsumerEntry {
            kind: "self-named".into(),
            name: "minutes".into(),
            streams: None,
            settings: serde_json::Map::new(),
        };
        let env = BuildEnv {
            worker_id: "w".into(),
            clock: Arc::new(weir_core::SystemClock),
            aws: Arc::new(weir_aws::clients::Clients::default()),
            stream_name: "s".into(),
            archive_prefix: None,
            replay_job: None,
        };
        let built = registry.build(&[entry], &env).await.unwrap();
        assert_eq!(built.consumers.iter().map(|c| c.name()).collect::<Vec<_>>(), ["minutes"]);
    }
}
