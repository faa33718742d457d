//! Which of a worker's shards still have records to read or to hand to consumers, for
//! shard ends that wait for the others ([`crate::RuntimeConfig::close_ends_together`]).
//!
//! A shard worker counts from its start until its read has ended and every batch read
//! is processed by the consumers (or it stops): a close queued behind another shard's
//! unprocessed batches would have a consumer flush before those records come. One
//! waiting on its parents counts too, since it will read. Shard workers whose
//! closes wait watch [`ActiveReads::idle`], which changes only when the count reaches
//! or leaves zero, so thousands of waiting shards are not woken at every shard's end.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// The count of this worker's shards with records left to read or deliver.
#[derive(Clone)]
pub(crate) struct ActiveReads(Arc<Inner>);

struct Inner {
    count: Mutex<usize>,
    /// Whether the count is zero.
    idle: watch::Sender<bool>,
}

impl ActiveReads {
    pub(crate) fn new() -> Self {
        Self(Arc::new(Inner { count: Mutex::new(0), idle: watch::Sender::new(true) }))
    }

    /// One more shard reads, until the returned guard is finished or dropped.
    pub(crate) fn start(&self) -> Reading {
        let mut count = self.0.count.lock().unwrap_or_else(|p| p.into_inner());
        *count += 1;
        self.0.idle.send_if_modified(|idle| std::mem::replace(idle, false));
        Reading(Some(self.clone()))
    }

    /// Whether no shard of the worker reads now.
    pub(crate) fn is_idle(&self) -> bool {
        *self.0.idle.borrow()
    }

    /// Changes when the worker's reads all end, or one starts again.
    pub(crate) fn idle(&self) -> watch::Receiver<bool> {
        self.0.idle.subscribe()
    }

    fn end(&self) {
        let mut count = self.0.count.lock().unwrap_or_else(|p| p.into_inner());
        *count = count.saturating_sub(1);
        if *count == 0 {
            self.0.idle.send_if_modified(|idle| !std::mem::replace(idle, true));
        }
    }
}

/// A shard counted as reading; it stops counting when finished or dropped.
pub(crate) struct Reading(Option<ActiveReads>);

impl Reading {
    /// The shard's records are all read and delivered.
    pub(crate) fn finish(&mut self) {
        if let Some(reads) = self.0.take() {
            reads.end();
        }
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_changes_only_at_zero() {
        let reads = ActiveReads::new();
        let mut idle = reads.idle();
        assert!(reads.is_idle());
        let mut a = reads.start();
        let b = reads.start();
        assert!(!reads.is_idle());
        assert!(idle.has_changed().unwrap());
        idle.borrow_and_update();
        a.finish();
        a.finish();
        assert!(!reads.is_idle() && !idle.has_changed().unwrap(), "one read left: no change seen");
        drop(b);
        assert!(reads.is_idle() && idle.has_changed().unwrap());
        drop(a);
        assert!(reads.is_idle(), "a finished guard counts once");
    }
}
