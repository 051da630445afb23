//! jemalloc's per-thread caches, off for the operator's threads.
//!
//! Each thread keeps objects it freed in a cache of its own (jemalloc's `tcache`) so its next
//! allocation of that size takes no lock, and refills it in bulk from the arenas: by default
//! up to 200 objects a size class, half of them on a miss. A thread that runs a pass now and
//! then keeps its caches filled, and at 1,000 clusters the operator's threads held ~5 MiB that
//! way, pinning pages too (`docs/performance.md`). `steward operator` calls [`turn_off`]: its
//! threads allocate from the arenas directly (each thread still has an arena of its own, so the
//! lock is rarely contended; the lock calls are ~10 % of the steady passes' CPU). Other
//! commands keep the caches: `steward dev`, whose embedded API server serves every e2e test,
//! trades memory for speed the other way.

use std::sync::atomic::{AtomicBool, Ordering};

use tikv_jemalloc_ctl::{Access, AsName};

/// Threads started from now on run without a cache.
static OFF: AtomicBool = AtomicBool::new(false);

/// This thread and every thread that calls [`on_thread_start`] from now on allocate without a
/// per-thread cache.
pub fn turn_off() {
    OFF.store(true, Ordering::Release);
    on_thread_start();
}

/// For a runtime's `on_thread_start` (and the start of a thread of Steward's own): turns this
/// thread's cache off when [`turn_off`] was called. Returns whether the thread runs without one.
pub fn on_thread_start() -> bool {
    OFF.load(Ordering::Acquire) && switch_off()
}

/// Turns this thread's cache off (what it holds goes back to the arenas). `false` when the
/// switch failed (jemalloc not linked in, say).
fn switch_off() -> bool {
    let enabled = b"thread.tcache.enabled\0".name();
    enabled.write(false).is_ok() && matches!(Access::<bool>::read(enabled), Ok(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache_on() -> bool {
        Access::<bool>::read(b"thread.tcache.enabled\0".name()).unwrap()
    }

    #[test]
    fn threads_started_after_turn_off_run_without_a_cache() {
        // Before: a thread keeps its cache.
        std::thread::spawn(|| {
            assert!(!on_thread_start());
            assert!(cache_on());
        })
        .join()
        .unwrap();
        std::thread::spawn(|| {
            turn_off();
            assert!(!cache_on());
        })
        .join()
        .unwrap();
        std::thread::spawn(|| {
            assert!(cache_on(), "a new thread starts with a cache");
            assert!(on_thread_start());
            assert!(!cache_on());
        })
        .join()
        .unwrap();
        OFF.store(false, Ordering::Release);
    }
}
