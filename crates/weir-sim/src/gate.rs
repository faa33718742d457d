//! A simulated process's door to the world: every call a worker makes to the lease
//! table, the object store, the stream and the Lambda passes through its node's gate,
//! which decides, from the simulation's seed, what happens to it.
//!
//! - **Crash**: the node dies at a planned call (before or after the call takes effect,
//!   the reply then lost with the process) or at a planned time. A dead node's calls
//!   never return and never take effect; its tasks are aborted.
//! - **Pause** (a zombie): every call waits while the node is paused, including replies
//!   to calls already made; then they go on, late, with the beliefs the node had.
//! - **Lost reply**: the call takes effect, and the caller gets a retryable error.
//! - **Failure**: the call does not take effect, and the caller gets a retryable error.
//! - **Delay**: a few milliseconds before and after (so concurrent calls interleave in
//!   the orders the seed picks), sometimes seconds (slow calls).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use crate::faults::Port;
use crate::world::World;

/// What a call is, for fault rates and the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A lease table read (get, list, workers, namespace).
    LeaseRead,
    /// A lease table write of one item.
    LeaseWrite,
    /// A lease table transaction.
    LeaseBatch,
    /// An object put (create-only).
    Put,
    /// An object get, stat or list.
    ObjectRead,
    /// An object delete.
    Delete,
    /// A stream read (open, next batch, list shards).
    StreamRead,
    /// A Lambda invocation.
    Invoke,
}

impl Op {
    /// Which port's fault rates apply.
    pub(crate) fn port(self) -> Port {
        match self {
            Op::LeaseRead | Op::LeaseWrite | Op::LeaseBatch => Port::Table,
            Op::Put | Op::ObjectRead | Op::Delete => Port::Store,
            Op::StreamRead => Port::Stream,
            Op::Invoke => Port::Lambda,
        }
    }
}

/// What happens to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// It takes effect and its answer arrives.
    Apply,
    /// It fails before taking effect.
    Fail,
    /// It takes effect; its answer is lost (the caller sees a retryable error).
    LoseReply,
}

/// A node's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    /// Running.
    Running,
    /// Stopped (a zombie to be): calls wait.
    Paused,
    /// Dead: calls never return.
    Crashed,
}

/// A call in progress: what the gate decided.
#[derive(Debug)]
pub struct Ticket {
    /// Whether and how it takes effect.
    pub fate: Fate,
    /// The call's number, when the process is to crash once it took effect.
    crash_after: Option<u64>,
    after: Duration,
}

/// One process's gate. A restarted process gets a new one.
pub struct Gate {
    name: String,
    world: Arc<World>,
    life: watch::Sender<Life>,
    calls: AtomicU64,
    /// Crash at this call (counted from 1).
    crash_at: Mutex<Option<u64>>,
    crashed: CancellationToken,
    task: Mutex<Option<AbortHandle>>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").field("name", &self.name).field("life", &*self.life.borrow()).finish()
    }
}

impl Gate {
    /// The gate of process `name`.
    pub fn new(name: String, world: Arc<World>) -> Arc<Self> {
        let (life, _) = watch::channel(Life::Running);
        Arc::new(Self {
            name,
            world,
            life,
            calls: AtomicU64::new(0),
            crash_at: Mutex::new(None),
            crashed: CancellationToken::new(),
            task: Mutex::new(None),
        })
    }

    /// The process's name (worker id and incarnation).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The world behind the gate.
    pub fn world(&self) -> &Arc<World> {
        &self.world
    }

    /// The process's main task, aborted when it crashes.
    pub fn set_task(&self, task: AbortHandle) {
        *self.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    /// Crashes the process at its `n`-th call from now.
    pub fn crash_at_call(&self, n: u64) {
        let at = self.calls.load(Ordering::SeqCst) + n.max(1);
        *self.crash_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(at);
    }

    /// Forgets a planned crash (the faults stopped).
    pub fn spare(&self) {
        *self.crash_at.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Kills the process now: its calls never return, its tasks are aborted.
    pub fn crash(&self) {
        if self.life() == Life::Crashed {
            return;
        }
        self.world.note(format_args!("{} crashes", self.name));
        self.life.send_replace(Life::Crashed);
        self.crashed.cancel();
        if let Some(task) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
    }

    /// Stops (or resumes) the process's calls.
    pub fn pause(&self, paused: bool) {
        let next = if paused { Life::Paused } else { Life::Running };
        self.life.send_if_modified(|l| {
            if *l == Life::Crashed || *l == next {
                return false;
            }
            *l = next;
            true
        });
    }

    /// The process's state.
    pub fn life(&self) -> Life {
        *self.life.borrow()
    }

    /// Fires when the process crashed.
    pub fn crashed(&self) -> &CancellationToken {
        &self.crashed
    }

    /// Waits while paused; never returns once crashed.
    async fn running(&self) {
        let mut rx = self.life.subscribe();
        loop {
            let life = *rx.borrow_and_update();
            match life {
                Life::Running => return,
                Life::Crashed => std::future::pending::<()>().await,
                Life::Paused => {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }

    /// A call starts: waits as the process would, and says what happens to it. Never
    /// returns if the process is (or becomes) dead before the call takes effect.
    pub async fn enter(&self, op: Op, what: &str) -> Ticket {
        self.running().await;
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let planned_crash = *self.crash_at.lock().unwrap_or_else(|p| p.into_inner()) == Some(n);
        let (fate, before, after, crash_after) = {
            let rates = self.world.rates(op.port());
            let mut rng = self.world.rng();
            let delay = |rng: &mut rand::rngs::StdRng| {
                if rates.slow > 0.0 && rng.random_bool(rates.slow) {
                    Duration::from_millis(rng.random_range(500..=rates.slow_max_ms.max(501)))
                } else {
                    Duration::from_millis(rng.random_range(0..=rates.jitter_ms))
                }
            };
            let (before, after) = (delay(&mut rng), delay(&mut rng));
            let fate = if self.world.is_out(op.port()) || (rates.fail > 0.0 && rng.random_bool(rates.fail)) {
                Fate::Fail
            } else if rates.lose_reply > 0.0 && rng.random_bool(rates.lose_reply) {
                Fate::LoseReply
            } else {
                Fate::Apply
            };
            let crash_after = (planned_crash && rng.random_bool(0.5)).then_some(n);
            (fate, before, after, crash_after)
        };
        if !before.is_zero() {
            tokio::time::sleep(before).await;
        }
        self.running().await;
        // Still planned (the faults may have stopped while the call waited).
        let still_planned = *self.crash_at.lock().unwrap_or_else(|p| p.into_inner()) == Some(n);
        if planned_crash && still_planned && crash_after.is_none() {
            self.world.note(format_args!("{} crash before {op:?} {what}", self.name));
            self.crash();
            std::future::pending::<()>().await;
        }
        self.world.note(format_args!("{} {op:?} {what} {fate:?}", self.name));
        Ticket { fate, crash_after, after }
    }

    /// A call that took effect (or failed) returns: waits as the process would; never
    /// returns if the process dies on the way.
    pub async fn leave(&self, ticket: &Ticket) {
        if !ticket.after.is_zero() {
            tokio::time::sleep(ticket.after).await;
        }
        // Still planned: a call that outlives the faults (a long read) does not crash
        // the process after they stopped.
        let planned = *self.crash_at.lock().unwrap_or_else(|p| p.into_inner());
        if ticket.crash_after.is_some() && ticket.crash_after == planned {
            self.world.note(format_args!("{} crash after the call", self.name));
            self.crash();
        }
        self.running().await;
    }
}
