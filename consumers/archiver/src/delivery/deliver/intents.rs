//! Intents (exactly-once mode): before a round's puts, one intent per shard of each
//! new object stored in the shard's lease, inline when few and otherwise in one
//! manifest object named by the lease ([`crate::delivery::manifest`]); manifests
//! deleted once a checkpoint passes them.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use futures::StreamExt;
use weir_core::ports::{PutOptions, PutOutcome, SinkError};
use weir_core::{Acks, Intent, IntentError, IntentWrite, ShardId};

use super::{Delivery, DeliveryMode, DoomedManifest, IntentFailure, Pending};
use crate::delivery::body::Deflater;
use crate::delivery::budget::Placement;
use crate::delivery::manifest::{self, IntentRef};
use crate::metrics as m;

impl Delivery {
    /// A shard opened with these open intents (exactly-once).
    pub fn shard_opened(&mut self, shard: &ShardId, intents: &[Intent]) {
        self.inline.opened(shard, intents);
    }

    /// A checkpoint passed these intents of `shard`: returns the manifests to delete
    /// (with [`Delivery::delete_manifest`]), with those they absorbed when this process
    /// wrote them.
    pub fn intents_passed(&mut self, shard: &ShardId, intents: &[Intent]) -> Vec<DoomedManifest> {
        self.inline.passed(shard, intents);
        let mut doomed = Vec::new();
        let mut keys: Vec<String> =
            intents.iter().filter(|i| manifest::is_manifest(i)).map(|i| i.target.clone()).collect();
        while let Some(key) = keys.pop() {
            let read = match self.absorbed.remove(&key) {
                Some(absorbed) => {
                    keys.extend(absorbed);
                    false
                }
                None => true,
            };
            doomed.push(DoomedManifest { key, read });
        }
        doomed
    }

    /// Chooses keys and (exactly-once) stores intents for objects that have none.
    pub(super) async fn record_intents(
        &mut self,
        ready: &mut Vec<Pending>,
        acks: &dyn Acks,
        deflater: &mut Deflater,
    ) -> Result<(), IntentStep> {
        let mut scratch = String::with_capacity(256);
        for p in ready.iter_mut().filter(|p| p.key.is_none()) {
            p.key = Some(self.key_for(&p.sealed, &mut scratch));
        }
        if self.mode == DeliveryMode::Firehose {
            return Ok(());
        }
        let Some(log) = acks.intents() else {
            let rest = std::mem::take(ready);
            return Err(IntentStep::Fail(IntentFailure::NoIntentLog, rest));
        };
        // Intents are (re)written for objects whose key is new in this round.
        let fresh: Vec<usize> = (0..ready.len()).filter(|i| !ready[*i].intents_stored).collect();
        if fresh.is_empty() {
            return Ok(());
        }
        // Per shard, the intents of this round's new objects: inline when few, else
        // one manifest.
        let scopes: Vec<String> = fresh.iter().map(|&i| ready[i].sealed.key.scope()).collect();
        // Error outputs name their records exactly (which records an error output gets
        // can differ between owners); data partitions by range and partition, or
        // exactly too behind a transform that can change its mind (`exact_data`).
        let runs: Vec<Vec<Vec<weir_core::PartRun>>> = fresh
            .iter()
            .map(|&i| ready[i].sealed.spans().map(|(shard, _)| ready[i].sealed.runs(shard)).collect())
            .collect();
        let mut per_shard: BTreeMap<&ShardId, Vec<IntentRef<'_>>> = BTreeMap::new();
        for ((&i, scope), runs) in fresh.iter().zip(&scopes).zip(&runs) {
            let p = &ready[i];
            let target = p.key.as_deref().unwrap_or_default();
            for ((shard, span), parts) in p.sealed.spans().zip(runs) {
                per_shard.entry(shard).or_default().push(IntentRef {
                    target,
                    scope,
                    first: &span.first,
                    last: &span.last,
                    parts,
                    except: p.sealed.except(shard),
                });
            }
        }
        let mut writes = Vec::new();
        let mut inline = Vec::new();
        let mut manifests: Vec<NewManifest> = Vec::new();
        let mut unencodable = false;
        for (shard, list) in per_shard {
            match self.inline.place(shard, &list) {
                Placement::Inline(bytes) => {
                    inline.push((shard.clone(), list.len(), bytes));
                    let add = list.iter().map(IntentRef::to_intent).collect();
                    writes.push(IntentWrite { shard: shard.clone(), add, replacing: Vec::new() });
                }
                Placement::Manifest { absorbing } => {
                    let key = manifest::key(&self.consumer, shard);
                    let Some((body, intent)) = manifest::write(&key, shard, &list, &absorbing) else {
                        unencodable = true;
                        break;
                    };
                    let replacing = absorbing.iter().map(|a| a.target.clone()).collect();
                    writes.push(IntentWrite { shard: shard.clone(), add: vec![intent.clone()], replacing });
                    manifests.push(NewManifest { shard: shard.clone(), key, body, intent, absorbing });
                }
            }
        }
        drop((scopes, runs));
        if unencodable {
            for &i in fresh.iter().rev() {
                ready[i].key = None;
            }
            return Err(IntentStep::Fail(IntentFailure::Unencodable, std::mem::take(ready)));
        }
        if let Err(why) = self.put_manifests(&manifests).await {
            for &i in fresh.iter().rev() {
                ready[i].key = None;
            }
            return Err(IntentStep::Fail(why, std::mem::take(ready)));
        }
        match log.record(writes).await {
            Ok(()) => {
                for &i in &fresh {
                    ready[i].intents_stored = true;
                }
                for (shard, n, bytes) in inline {
                    self.inline.recorded_inline(&shard, n, bytes);
                }
                for m in manifests {
                    self.inline.recorded_manifest(&m.shard, m.intent, &m.absorbing);
                    self.absorbed.insert(m.key, m.absorbing.into_iter().map(|a| a.target).collect());
                }
                Ok(())
            }
            Err(IntentError::NotHeld(lost)) => {
                let lost: BTreeSet<ShardId> = lost.into_iter().collect();
                // The lost shards' new manifests stay: a write that timed out with the
                // lease's validity may have landed, and the lease then names them (a
                // leftover is found and deleted when the shard opens next).
                tracing::warn!(?lost, "leases lost before objects were written; rebuilding them without those shards");
                // Only this round's new objects: some of their intents may be stored and
                // some not, so they take new keys (none of them was put). Objects whose
                // intents were stored in an earlier round keep their keys: their puts may
                // have landed (see `forget_shard`).
                let mut rest = Vec::new();
                let fresh: BTreeSet<usize> = fresh.into_iter().collect();
                for (i, p) in ready.drain(..).enumerate() {
                    if !fresh.contains(&i) {
                        rest.push(p);
                        continue;
                    }
                    match p.sealed.without(&lost, deflater) {
                        Ok(Some(s)) => rest.push(Pending::new(s)),
                        Ok(None) => {}
                        Err(e) => {
                            tracing::error!(error = %e, "cannot rebuild an object");
                        }
                    }
                }
                Err(IntentStep::Retry(rest))
            }
            Err(IntentError::Store(msg)) => {
                for &i in fresh.iter().rev() {
                    ready[i].key = None;
                }
                Err(IntentStep::Fail(IntentFailure::Store(msg), std::mem::take(ready)))
            }
        }
    }

    /// Writes intent manifests, create-only, before the intents naming them.
    async fn put_manifests(&self, manifests: &[NewManifest]) -> Result<(), IntentFailure> {
        let options = PutOptions { content_type: Some("application/octet-stream".into()), ..PutOptions::default() };
        let puts: Vec<_> = manifests
            .iter()
            .map(|m| {
                let (sink, options, key, body) = (self.sink.clone(), options.clone(), m.key.clone(), m.body.clone());
                async move {
                    let r = sink.put_if_absent(&key, body, &options).await;
                    (key, r)
                }
            })
            .collect();
        let results: Vec<(String, Result<PutOutcome, SinkError>)> =
            futures::stream::iter(puts).buffer_unordered(self.concurrency).collect().await;
        for (key, r) in results {
            match r {
                Ok(PutOutcome::Created) => metrics::counter!(m::MANIFESTS).increment(1),
                Ok(PutOutcome::AlreadyExists) => return Err(IntentFailure::ManifestExists(key)),
                Err(error) => return Err(IntentFailure::Manifest { key, error }),
            }
        }
        Ok(())
    }

    /// Deletes a manifest no lease names, and (when it was written by another process)
    /// the manifests it says it absorbed (best effort: a leftover is only clutter).
    pub async fn delete_manifest(&self, doomed: DoomedManifest) {
        let mut doomed = vec![doomed];
        while let Some(DoomedManifest { key, read }) = doomed.pop() {
            if read {
                let absorbed = match self.absorbed.get(&key) {
                    Some(known) => known.clone(),
                    None => match self.sink.get(&key).await {
                        Ok(Some(body)) => manifest::absorbed_by(&body),
                        _ => Vec::new(),
                    },
                };
                doomed.extend(absorbed.into_iter().map(|key| DoomedManifest { key, read: true }));
            }
            self.delete_one(&key).await;
        }
    }

    async fn delete_one(&self, key: &str) {
        match self.sink.delete(key).await {
            Ok(()) => metrics::counter!(m::MANIFESTS_DELETED).increment(1),
            Err(e) => tracing::warn!(key, error = %e, "cannot delete an intent manifest; it stays as clutter"),
        }
    }
}

/// A manifest a round writes.
struct NewManifest {
    shard: ShardId,
    key: String,
    body: Bytes,
    /// Its intent in the lease.
    intent: Intent,
    /// The manifest intents it absorbs (and replaces in the lease).
    absorbing: Vec<Intent>,
}

/// Why a round's intents were not all stored.
pub(super) enum IntentStep {
    /// Leases were lost: these objects, rebuilt without their records, go again.
    Retry(Vec<Pending>),
    /// Nothing is known to be stored: these objects wait in the backlog.
    Fail(IntentFailure, Vec<Pending>),
}
