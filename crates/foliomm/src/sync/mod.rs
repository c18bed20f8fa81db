//! The synchronisation facade and the kernel's lock primitives.
//!
//! Every atomic, lock, thread spawn and yield of the library comes from
//! here: `std` normally, [loom](https://docs.rs/loom) under `cfg(loom)`, so
//! that lock protocols can be checked over every interleaving (tokio's
//! `src/loom/` follows the same pattern), and
//! [shuttle](https://docs.rs/shuttle) under `cfg(shuttle)`, so that whole
//! workloads run under randomized, replayable schedules (tests/shuttle.rs). `Arc`/`Weak` stay `std` in both
//! (they are ownership, not a protocol, and loom's `Arc` has no `Weak`), and
//! so do the words of the frame arena ([`crate::phys`]): they model RAM,
//! which loom cannot map.
//!
//! The primitives: [`BitSpinLock`] (`bit_spin_lock`: split PTLs, the folio
//! lock, the mapcount locks), [`RwSem`] (a VMA's `vm_lock` in the 6.4-6.14
//! per-VMA lock design) and [`AtomicSeqcount`] (seed 000's seqcount
//! with concurrent writers). [`cacheline`] accounts the cache-line
//! transfers between simulated CPUs of the words the fault path shares
//! (its owner records are `std` atomics: instrumentation, not protocol).
//! [`sim`] runs a threaded workload on simulated CPUs in virtual time; the
//! `Mutex` and `RwLock` here (`lock.rs`, `std`'s outside loom and shuttle)
//! wait in simulated time inside one. Loom tests: `loom_tests` (run them with
//! `RUSTFLAGS="--cfg loom" cargo test --release -p foliomm --lib loom`).

mod bit_spinlock;
pub mod cacheline;
#[cfg(not(any(loom, shuttle)))]
mod lock;
#[cfg(all(test, loom))]
mod loom_tests;
mod rwsem;
mod seqcount;
pub mod sim;
pub mod structure;
#[cfg(all(test, not(loom)))]
mod tests;

pub use bit_spinlock::BitSpinLock;
pub use rwsem::RwSem;
pub use seqcount::{AtomicSeqcount, SeqEntry, SeqWrite};

#[cfg(not(any(loom, shuttle)))]
pub use lock::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(loom)]
pub use loom::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(all(shuttle, not(loom)))]
pub use shuttle::sync::Barrier;
#[cfg(all(shuttle, not(loom)))]
pub use shuttle::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(not(any(loom, shuttle)))]
pub use std::sync::Barrier;

/// A sleeping `struct mutex` ([`Mutex::new_mutex`]; under loom and shuttle
/// their mutex).
pub fn new_mutex<T>(t: T) -> Mutex<T> {
    #[cfg(not(any(loom, shuttle)))]
    return Mutex::new_mutex(t);
    #[cfg(any(loom, shuttle))]
    Mutex::new(t)
}

/// A write hold turned into a read hold by [`downgrade`]; under loom and
/// shuttle, whose rwsems cannot downgrade, the write hold itself.
#[cfg(not(any(loom, shuttle)))]
pub type Downgraded<'a, T> = RwLockReadGuard<'a, T>;
/// A write hold turned into a read hold by [`downgrade`]; under loom and
/// shuttle, whose rwsems cannot downgrade, the write hold itself.
#[cfg(any(loom, shuttle))]
pub type Downgraded<'a, T> = RwLockWriteGuard<'a, T>;

/// `downgrade_write` ([`RwLockWriteGuard::downgrade`] of the facade's
/// rwsem); under loom and shuttle the write hold is kept: they never run
/// readers beside what follows a downgrade, which only threads and the
/// simulation reach.
pub fn downgrade<T>(g: RwLockWriteGuard<'_, T>) -> Downgraded<'_, T> {
    #[cfg(not(any(loom, shuttle)))]
    return g.downgrade();
    #[cfg(any(loom, shuttle))]
    g
}

pub use std::sync::{Arc, Weak};

/// Atomic integers, fences and orderings.
pub mod atomic {
    #[cfg(loom)]
    pub use loom::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
    #[cfg(all(shuttle, not(loom)))]
    pub use shuttle::sync::atomic::{
        fence, AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering,
    };
    #[cfg(not(any(loom, shuttle)))]
    pub use std::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
}

/// Threads: spawning (also scoped: not under loom, which has no scopes),
/// yielding and sleeping.
pub mod thread {
    #[cfg(loom)]
    pub use loom::thread::{spawn, yield_now};
    #[cfg(all(shuttle, not(loom)))]
    pub use shuttle::thread::{scope, spawn, yield_now};
    #[cfg(not(any(loom, shuttle)))]
    pub use std::thread::{scope, spawn, yield_now};

    /// Sleeps `d` (under loom or shuttle, a yield: neither has a clock).
    pub fn sleep(d: std::time::Duration) {
        #[cfg(any(loom, shuttle))]
        {
            let _ = d;
            yield_now();
        }
        #[cfg(not(any(loom, shuttle)))]
        std::thread::sleep(d);
    }
}

thread_local! {
    /// The CPU [`on_cpu`] put this thread on, if any.
    static PLACED: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// The simulated CPU this thread runs as (`smp_processor_id`): its CPU in
/// a simulation ([`sim`]), else the CPU [`on_cpu`] put it on, else its
/// accounting CPU when it has one ([`cacheline::account_as`]), else a
/// number it gets on first use. Under loom and shuttle all model threads
/// share their OS thread's number.
pub fn this_cpu() -> usize {
    thread_local! {
        static OWN: usize = {
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        };
    }
    match (sim::cpu(), PLACED.get(), cacheline::cpu()) {
        (Some(c), _, _) => c,
        (None, Some(c), _) => c,
        (None, None, 0) => OWN.with(|c| *c),
        (None, None, c) => c as usize,
    }
}

/// Runs `f` with this thread on CPU `cpu` (where `sched_setaffinity` put
/// it: a scenario thread's `cpu N`), so that the per-CPU structures it
/// meets (LRU batches, page lists) are that CPU's; a simulation's own
/// placement wins. The previous placement comes back after `f`.
pub fn on_cpu<R>(cpu: usize, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            PLACED.set(self.0);
        }
    }
    let _restore = Restore(PLACED.replace(Some(cpu)));
    f()
}

/// One round of waiting for a sleeping lock whose word is at `key` (a
/// rwsem, or a writer waiting on `rcuwait` for readers to leave): on
/// simulated CPUs, sleep on its wait list (to write if `writer`; after the
/// first round at the head) until a release wakes it ([`sim::wake`]);
/// elsewhere a [`backoff`] round. Counts the round in `spins`.
pub(crate) fn sleep_wait(spins: &mut u32, key: usize, writer: bool) {
    if sim::active() {
        *spins += 1;
        return sim::sleep(key, writer, *spins > 1);
    }
    backoff(spins, key);
}

/// After a wait of `spins` [`sleep_wait`] rounds for the lock at `key`
/// ended with the lock taken: a woken writer stops being the first waiter.
pub(crate) fn sleep_done(spins: u32, key: usize) {
    if spins > 0 && sim::active() {
        sim::acquired(key);
    }
}

/// Wakes the waiters of the sleeping lock at `key` after a release, on
/// simulated CPUs (elsewhere waiters poll: nothing to do).
pub(crate) fn wake_waiters(key: usize) {
    if sim::active() {
        sim::wake(key);
    }
}

/// `cond_resched()`: a point inside a long operation (zeroing a huge page)
/// where the task may let another run. A switch point under shuttle;
/// nothing elsewhere (the OS preempts model threads anywhere, and loom's
/// bounded preemptions are spent on synchronizing steps).
pub(crate) fn cond_resched() {
    #[cfg(shuttle)]
    thread::yield_now();
}

/// One round of waiting for a lock or a seqcount whose word is at `key`
/// (0: not a lock): spin, and every 64th round yield the CPU (model
/// threads may be preempted while holding what we wait for). Under loom
/// and shuttle every round yields, as their schedulers require of spin
/// loops; on simulated CPUs it is a [`sim::spin`]. Counts the round in
/// `spins`.
pub(crate) fn backoff(spins: &mut u32, key: usize) {
    *spins += 1;
    #[cfg(any(loom, shuttle))]
    {
        let _ = key;
        thread::yield_now();
    }
    #[cfg(not(any(loom, shuttle)))]
    if sim::active() {
        sim::spin(key);
    } else if spins.is_multiple_of(64) {
        thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}
