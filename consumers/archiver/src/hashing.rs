//! The hasher of the archiver's hot maps (open buffers by route, the ledger's
//! generations, written keys): foldhash, as a route or key is hashed for every record.
//!
//! Seeded from `rand` rather than from foldhash's default (a stack address, which
//! address-space randomisation changes run to run), so that a process whose randomness
//! is seeded (the deterministic simulator, `weir-sim`) walks these maps in the same
//! order every time and a failing seed replays exactly. The seed stays random in
//! production, which keeps the maps' layout unpredictable to whoever chooses the keys.

use std::hash::BuildHasher;

use foldhash::SharedSeed;
use foldhash::fast::{FoldHasher, SeedableRandomState};

/// foldhash with a per-map seed drawn from `rand`.
#[derive(Debug, Clone)]
pub struct FastHash(SeedableRandomState);

impl Default for FastHash {
    fn default() -> Self {
        Self(SeedableRandomState::with_seed(rand::random(), SharedSeed::global_fixed()))
    }
}

impl BuildHasher for FastHash {
    type Hasher = FoldHasher<'static>;

    fn build_hasher(&self) -> Self::Hasher {
        self.0.build_hasher()
    }
}
