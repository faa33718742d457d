//! Randomness that a seed decides, so that a failing seed replays exactly.
//!
//! The code under test draws randomness it does not get as a parameter: object names
//! and manifest keys (`rand`), worker instance tokens, backoff jitter, the order in which
//! `std`'s hash maps are walked (their keys come from the OS), and the branch tokio's
//! `select!` polls first (seeded from a std hash map key). Every one of them reaches the
//! operating system through the C library's `getrandom` (or `getentropy`). This module
//! defines both symbols in the simulator's binaries: while a thread runs a simulation
//! ([`seed_this_thread`]), they answer from a generator seeded by the simulation's seed;
//! on every other thread, and outside a simulation, they call the C library's own.
//!
//! This is how madsim and similar simulators make std and tokio deterministic; it is the
//! one `unsafe` module of the simulator. The code under test keeps no randomness of its
//! own that bypasses it: its hot hash maps are seeded from `rand` (see the archiver's
//! `hashing.rs`), and time comes from tokio's paused clock. `tests/determinism.rs` runs a
//! seed twice in separate processes and compares the traces.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::OnceLock;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

thread_local! {
    static RNG: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// While alive, `getrandom` on this thread answers from the seed. Create it before the
/// simulation's runtime and before any hash map of the thread: `std` draws a thread's
/// hash map keys once, at the first map.
#[derive(Debug)]
pub struct SeededThread(());

/// Makes this thread's randomness come from `seed` (see the module documentation).
pub fn seed_this_thread(seed: u64) -> SeededThread {
    RNG.with_borrow_mut(|r| *r = Some(StdRng::seed_from_u64(seed ^ 0x005e_ed0f_5111)));
    SeededThread(())
}

impl Drop for SeededThread {
    fn drop(&mut self) {
        let _ = RNG.try_with(|r| r.borrow_mut().take());
    }
}

/// Fills `buf` from the seeded generator; `false` when this thread has none.
fn fill_seeded(buf: &mut [u8]) -> bool {
    RNG.try_with(|r| match r.try_borrow_mut() {
        Ok(mut r) => match r.as_mut() {
            Some(rng) => {
                rng.fill_bytes(buf);
                true
            }
            None => false,
        },
        Err(_) => false,
    })
    .unwrap_or(false)
}

type GetRandom = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> isize;
type GetEntropy = unsafe extern "C" fn(*mut c_void, usize) -> c_int;

/// The C library's definition of `name`, found past this binary's own.
fn next_symbol(name: &std::ffi::CStr) -> *mut c_void {
    // SAFETY: dlsym with a valid, NUL-terminated name; RTLD_NEXT looks past this object.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

/// `getrandom(2)`: seeded on a simulation's thread, the C library's elsewhere.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes, as for the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getrandom(buf: *mut c_void, len: usize, flags: c_uint) -> isize {
    if len > 0 && !buf.is_null() {
        // SAFETY: the caller guarantees `buf` holds `len` writable bytes.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        if fill_seeded(out) {
            return len as isize;
        }
    }
    static REAL: OnceLock<usize> = OnceLock::new();
    let real = *REAL.get_or_init(|| next_symbol(c"getrandom") as usize);
    if real == 0 {
        // SAFETY: the raw system call takes the same arguments.
        return unsafe { libc::syscall(libc::SYS_getrandom, buf, len, flags) as isize };
    }
    // SAFETY: `real` is the C library's getrandom, with this signature.
    unsafe { std::mem::transmute::<usize, GetRandom>(real)(buf, len, flags) }
}

/// `getentropy(3)`: seeded on a simulation's thread, the C library's elsewhere.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes, as for the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getentropy(buf: *mut c_void, len: usize) -> c_int {
    if len <= 256 && !buf.is_null() {
        // SAFETY: the caller guarantees `buf` holds `len` writable bytes.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        if fill_seeded(out) {
            return 0;
        }
    }
    static REAL: OnceLock<usize> = OnceLock::new();
    let real = *REAL.get_or_init(|| next_symbol(c"getentropy") as usize);
    if real == 0 {
        return -1;
    }
    // SAFETY: `real` is the C library's getentropy, with this signature.
    unsafe { std::mem::transmute::<usize, GetEntropy>(real)(buf, len) }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    /// One seed, one sequence: the same on two threads, another with another seed.
    #[test]
    fn a_seed_decides_rand_and_hash_map_order() {
        let draw = |seed: u64| {
            std::thread::spawn(move || {
                let _seeded = super::seed_this_thread(seed);
                let map: HashMap<u32, ()> = (0..32).map(|i| (i, ())).collect();
                (rand::random::<u128>(), map.keys().copied().collect::<Vec<_>>())
            })
            .join()
            .unwrap_or_default()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7).0, draw(8).0);
    }
}
