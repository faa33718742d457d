//! A shard's intent manifests when it opens: the ones its lease names are read (with
//! the ones they absorbed), and the leftovers no open intent names are deleted.

use std::collections::HashSet;

use bytes::Bytes;
use futures::StreamExt;
use weir_core::ports::{ObjectSink, PutOptions, PutOutcome, SinkError};
use weir_core::{ConsumerError, Intent, ShardId};

use crate::delivery::claim::RESOLVE_CONCURRENCY;
use crate::delivery::manifest;
use crate::metrics as m;

/// The manifests under `prefix` not in `reached` (leftovers, to be deleted by
/// [`delete_manifests`] once this owner has proven, by a conditional lease write made
/// after this listing, that it held the lease when it listed). An empty list when the
/// prefix cannot be listed.
pub async fn leftover_manifests(
    sink: &dyn ObjectSink,
    shard: &ShardId,
    prefix: &str,
    reached: &HashSet<String>,
) -> Vec<String> {
    match sink.list(prefix).await {
        Ok(listed) => listed.into_iter().map(|m| m.key).filter(|k| !reached.contains(k)).collect(),
        Err(e) => {
            tracing::debug!(%shard, error = %e, "cannot list intent manifests; leftovers stay");
            Vec::new()
        }
    }
}

/// Deletes leftover manifests found by [`leftover_manifests`] (best effort).
///
/// Only safe for a listing made while the caller held the shard's lease: a listing
/// made after the lease went (a paused worker resuming) holds the manifests the new
/// holder wrote and named, and deleting those makes the next owner take their objects
/// as never written (archived twice).
pub async fn delete_manifests(sink: &dyn ObjectSink, shard: &ShardId, doomed: Vec<String>) {
    if doomed.is_empty() {
        return;
    }
    tracing::info!(%shard, manifests = doomed.len(), "deleting intent manifests no open intent names");
    futures::stream::iter(doomed)
        .for_each_concurrent(RESOLVE_CONCURRENCY, |key| async move {
            match sink.delete(&key).await {
                Ok(()) => metrics::counter!(m::MANIFESTS_SWEPT).increment(1),
                Err(e) => tracing::debug!(key, error = %e, "cannot delete a leftover intent manifest"),
            }
        })
        .await;
}

/// The intents of a shard with its manifests expanded.
pub struct Expanded {
    /// Every intent (no manifests).
    pub intents: Vec<Intent>,
    /// The manifests read (named by the lease, or absorbed by one read).
    pub reached: HashSet<String>,
    /// Whether every manifest the lease names was read (else what it absorbed is not
    /// known, and no manifest is swept).
    pub complete: bool,
}

/// Replaces the intents naming manifests with the intents the manifests list, and
/// those of the manifests they absorbed (level by level). A manifest a lease names that
/// is missing or unreadable counts as "nothing written" (its records are archived
/// again) and is reported; an absorbed one that is missing was deleted when an earlier
/// manifest that also absorbed it passed (its records are behind the checkpoint). A
/// store error fails (retried).
pub async fn expand_manifests(
    sink: &dyn ObjectSink,
    shard: &ShardId,
    open: Vec<Intent>,
) -> Result<Expanded, ConsumerError> {
    let (manifests, intents): (Vec<Intent>, Vec<Intent>) = open.into_iter().partition(manifest::is_manifest);
    let mut out = Expanded { intents, reached: HashSet::new(), complete: true };
    let mut level: Vec<(String, bool)> = manifests.into_iter().map(|m| (m.target, false)).collect();
    while !level.is_empty() {
        level.retain(|(key, _)| out.reached.insert(key.clone()));
        let bodies: Vec<(String, bool, Result<Option<Bytes>, SinkError>)> =
            futures::stream::iter(std::mem::take(&mut level))
                .map(|(key, absorbed)| async move {
                    let body = match sink.get(&key).await {
                        Err(refused) if !refused.is_retryable() => missing_or(sink, &key, refused).await,
                        body => body,
                    };
                    (key, absorbed, body)
                })
                .buffer_unordered(RESOLVE_CONCURRENCY)
                .collect()
                .await;
        for (key, absorbed, body) in bodies {
            let listed = match body {
                Ok(Some(body)) => manifest::read(&key, shard, &body).map_err(|e| e.to_string()),
                Ok(None) if absorbed => {
                    tracing::debug!(%shard, key, "an absorbed intent manifest is gone (its records are behind the checkpoint)");
                    continue;
                }
                Ok(None) => Err(format!("intent manifest {key} is missing")),
                Err(e) => {
                    return Err(ConsumerError::with_source(format!("cannot read intent manifest {key}"), e));
                }
            };
            match listed {
                Ok(listed) => {
                    out.intents.extend(listed.intents);
                    level.extend(listed.absorbs.into_iter().map(|k| (k, true)));
                }
                Err(reason) => {
                    out.complete = false;
                    metrics::counter!(m::MANIFESTS_UNREADABLE).increment(1);
                    tracing::error!(%shard, %reason, "the records of an open intent manifest will be archived again (they may be duplicated)");
                }
            }
        }
    }
    Ok(out)
}

/// A read of `key` was refused for good. S3 refuses to read a missing key (403, not
/// 404) to a caller without `s3:ListBucket`, so whether the manifest is gone or
/// unreadable is told apart by a create-only put of an empty object at its key: if it
/// lands, nothing was there (the marker is deleted again; a manifest key is random and
/// put once, before any lease names it, so nothing writes it later); if the key exists,
/// the refusal stands.
async fn missing_or(sink: &dyn ObjectSink, key: &str, refused: SinkError) -> Result<Option<Bytes>, SinkError> {
    match sink.put_if_absent(key, Bytes::new(), &PutOptions::default()).await {
        Ok(PutOutcome::Created) => {
            if let Err(e) = sink.delete(key).await {
                tracing::warn!(key, error = %e, "cannot delete the marker put where a manifest was missing");
            }
            Ok(None)
        }
        Ok(PutOutcome::AlreadyExists) | Err(_) => Err(refused),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::{ExtendedSequenceNumber, SequenceNumber};
    use weir_testkit::MemoryObjectSink;

    fn p(n: u128) -> ExtendedSequenceNumber {
        ExtendedSequenceNumber::plain(SequenceNumber::from_u128(n))
    }

    fn data(key: &str, first: u128, last: u128) -> Intent {
        Intent { target: key.into(), scope: "t".into(), first: p(first), last: p(last), parts: vec![], except: vec![] }
    }

    /// Puts a manifest of `shard` at `key` listing `intents` and absorbing `absorbed`;
    /// the intent a lease would hold.
    async fn put_manifest(
        sink: &MemoryObjectSink,
        key: &str,
        shard: &ShardId,
        intents: &[Intent],
        absorbed: &[Intent],
    ) -> Intent {
        let refs: Vec<manifest::IntentRef<'_>> = intents
            .iter()
            .map(|i| manifest::IntentRef {
                target: &i.target,
                scope: &i.scope,
                first: &i.first,
                last: &i.last,
                parts: &i.parts,
                except: &i.except,
            })
            .collect();
        let (body, intent) = manifest::write(key, shard, &refs, absorbed).unwrap();
        sink.put_if_absent(key, body, &PutOptions::default()).await.unwrap();
        intent
    }

    /// A manifest left by a round whose intent write never landed is deleted when the
    /// shard opens; the ones the lease names, and those they absorbed, stay, and so do
    /// other shards' manifests.
    #[tokio::test]
    async fn leftover_manifests_are_swept_and_named_ones_stay() {
        let sink = MemoryObjectSink::new();
        let shard = ShardId::new("shardId-000000000001");
        let prefix = manifest::prefix("archive", &shard);
        let (named, absorbed, leftover) = (
            format!("{prefix}named.manifest"),
            format!("{prefix}absorbed.manifest"),
            format!("{prefix}leftover.manifest"),
        );
        let other = manifest::key("archive", &ShardId::new("shardId-000000000010"));
        let old = put_manifest(&sink, &absorbed, &shard, &[data("a.gz", 1, 2)], &[]).await;
        let lease = put_manifest(&sink, &named, &shard, &[data("b.gz", 3, 4)], &[old]).await;
        put_manifest(&sink, &leftover, &shard, &[data("c.gz", 5, 6)], &[]).await;
        put_manifest(&sink, &other, &ShardId::new("shardId-000000000010"), &[data("d.gz", 1, 1)], &[]).await;
        let expanded = expand_manifests(&sink, &shard, vec![lease]).await.unwrap();
        let targets: Vec<&str> = expanded.intents.iter().map(|i| i.target.as_str()).collect();
        assert_eq!(targets, ["b.gz", "a.gz"]);
        assert!(expanded.complete);
        let doomed = leftover_manifests(&sink, &shard, &prefix, &expanded.reached).await;
        delete_manifests(&sink, &shard, doomed).await;
        let left: Vec<String> = sink.snapshot().into_keys().collect();
        assert!(left.contains(&named) && left.contains(&absorbed) && left.contains(&other), "{left:?}");
        assert!(!left.contains(&leftover), "{left:?}");
    }

    /// Without `s3:ListBucket`, S3 refuses to read a missing key (403): a manifest the
    /// lease names that is gone is still found to be gone (not retried forever), the
    /// marker put to find out is deleted, and sweeping (a refused list) deletes nothing.
    #[tokio::test]
    async fn a_missing_manifest_is_found_gone_without_list_permission() {
        let sink = MemoryObjectSink::new();
        let shard = ShardId::new("shardId-000000000001");
        let prefix = manifest::prefix("archive", &shard);
        let gone = format!("{prefix}gone.manifest");
        let absorbed_gone =
            Intent { scope: manifest::MANIFEST_SCOPE.into(), ..data(&format!("{prefix}old.manifest"), 1, 2) };
        let here =
            put_manifest(&sink, &format!("{prefix}here.manifest"), &shard, &[data("b.gz", 3, 4)], &[absorbed_gone])
                .await;
        let leftover = format!("{prefix}leftover.manifest");
        put_manifest(&sink, &leftover, &shard, &[data("c.gz", 5, 6)], &[]).await;
        sink.deny_list();
        let named_gone = Intent { scope: manifest::MANIFEST_SCOPE.into(), ..data(&gone, 7, 8) };
        let expanded = expand_manifests(&sink, &shard, vec![here, named_gone]).await.unwrap();
        let targets: Vec<&str> = expanded.intents.iter().map(|i| i.target.as_str()).collect();
        assert_eq!(targets, ["b.gz"], "the missing manifest's records are archived again");
        assert!(!expanded.complete, "a named manifest was missing");
        assert!(!sink.snapshot().contains_key(&gone), "the marker is deleted");
        let doomed = leftover_manifests(&sink, &shard, &prefix, &expanded.reached).await;
        delete_manifests(&sink, &shard, doomed).await;
        assert!(sink.snapshot().contains_key(&leftover), "a refused list deletes nothing");
    }

    /// A refusal for a manifest that is there stands (a real permission problem): it is
    /// an error, not "nothing written".
    #[tokio::test]
    async fn a_refused_read_of_a_manifest_that_is_there_is_an_error() {
        struct Refusing(MemoryObjectSink);
        #[async_trait::async_trait]
        impl ObjectSink for Refusing {
            async fn put_if_absent(&self, key: &str, body: Bytes, o: &PutOptions) -> Result<PutOutcome, SinkError> {
                self.0.put_if_absent(key, body, o).await
            }
            async fn get(&self, _: &str) -> Result<Option<Bytes>, SinkError> {
                Err(SinkError::Store { message: "AccessDenied".into(), retryable: false, source: None })
            }
            async fn stat(&self, key: &str) -> Result<Option<weir_core::ports::ObjectMeta>, SinkError> {
                self.0.stat(key).await
            }
            async fn list(&self, prefix: &str) -> Result<Vec<weir_core::ports::ObjectMeta>, SinkError> {
                self.0.list(prefix).await
            }
            async fn delete(&self, key: &str) -> Result<(), SinkError> {
                self.0.delete(key).await
            }
            fn location(&self) -> String {
                "refusing".into()
            }
        }
        let sink = Refusing(MemoryObjectSink::new());
        let shard = ShardId::new("shardId-000000000001");
        let key = manifest::key("archive", &shard);
        let lease = put_manifest(&sink.0, &key, &shard, &[data("b.gz", 3, 4)], &[]).await;
        let refused = expand_manifests(&sink, &shard, vec![lease]).await;
        assert!(refused.is_err(), "a manifest that is there but cannot be read is not taken as gone");
        assert!(sink.0.snapshot().contains_key(&key), "and is left alone");
    }
}
