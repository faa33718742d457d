//! The outside systems a node calls, and the rates at which their calls fail, lose
//! their answers or are slow: what a scenario sets and the world keeps.

/// The four outside systems.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Port {
    /// The lease table.
    Table,
    /// The object store.
    Store,
    /// The stream.
    Stream,
    /// The transformation Lambda.
    Lambda,
}

/// Fault rates of one port, per call.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    /// A call fails without effect.
    pub fail: f64,
    /// A call takes effect and its answer is lost.
    pub lose_reply: f64,
    /// A call is slow (half a second up to `slow_max_ms`).
    pub slow: f64,
    /// Longest slow call.
    pub slow_max_ms: u64,
    /// Every call waits up to this long before and after (orders concurrent calls).
    pub jitter_ms: u64,
}
