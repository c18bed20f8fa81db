//! A reader/writer semaphore as one atomic count (`struct rw_semaphore`,
//! kernel/locking/rwsem.c), with the kernel's unguarded calls: a holder
//! may keep it across functions (as a fault keeps a VMA's `vm_lock`).
//!
//! Only writers wait (readers try-lock, as `vma_start_read` does): on
//! simulated CPUs a writer spins optimistically while the owner lets it
//! ([`super::sim::optimistic_spin`]), then sleeps on the wait list, and
//! the release that frees the semaphore wakes it ([`super::sleep_wait`]).
//!
//! Differs from Linux: outside a simulation a waiting writer spins and
//! yields instead of sleeping; there is no writer preference, and a
//! writer's first try ignores queued waiters and the handoff (VMA
//! writers are serialized by the mmap_lock: they never meet here).

use super::atomic::{AtomicI64, Ordering::*};
use super::{sim, sleep_done, sleep_wait};

/// The count: the number of readers, or `RwSem::WRITER` while a writer holds it.
#[derive(Debug, Default)]
pub struct RwSem(AtomicI64);

impl RwSem {
    const WRITER: i64 = -1;

    /// `down_read_trylock`: true if a read hold was taken (no writer holds
    /// it; on simulated CPUs, also none waits: `RWSEM_FLAG_WAITERS` fails
    /// the trylock).
    pub fn down_read_trylock(&self) -> bool {
        if super::sim::active() && super::sim::first_waiter(self.key()).is_some() {
            return false;
        }
        let mut c = self.0.load(Relaxed);
        while c >= 0 {
            match self.0.compare_exchange_weak(c, c + 1, Acquire, Relaxed) {
                Ok(_) => {
                    sim::rwsem_taken(self.key(), false);
                    return true;
                }
                Err(now) => c = now,
            }
        }
        false
    }

    /// `up_read`.
    pub fn up_read(&self) {
        let before = self.0.fetch_sub(1, Release);
        debug_assert!(before > 0, "up_read without a reader");
        sim::rwsem_released(self.key());
    }

    /// The count's address: the wait-list key.
    fn key(&self) -> usize {
        &self.0 as *const AtomicI64 as usize
    }

    /// `down_write`: waits until no reader or writer holds it.
    pub fn down_write(&self) {
        // Not `_weak`: a spurious failure would sleep with nobody to wake it.
        let take = || self.0.compare_exchange(0, Self::WRITER, Acquire, Relaxed).is_ok().then_some(());
        if take().is_none() && sim::optimistic_spin(self.key(), take).is_none() {
            let mut spins = 0;
            loop {
                sleep_wait(&mut spins, self.key(), true);
                if take().is_some() {
                    break;
                }
            }
            sleep_done(spins, self.key());
        }
        sim::rwsem_taken(self.key(), true);
    }

    /// `up_write`.
    pub fn up_write(&self) {
        debug_assert_eq!(self.0.load(Relaxed), Self::WRITER, "up_write without the writer");
        self.0.store(0, Release);
        sim::rwsem_released(self.key());
    }

    /// Readers holding it now (0 while a writer holds it).
    pub fn readers(&self) -> u32 {
        self.0.load(Relaxed).max(0) as u32
    }
}
