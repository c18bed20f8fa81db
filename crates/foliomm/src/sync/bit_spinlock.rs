//! `bit_spin_lock()` / `__bit_spin_unlock()` (include/linux/bit_spinlock.h):
//! one bit of an atomic word is the lock. It serves as the split page-table
//! lock (`ptdesc->ptl`, here `PG_locked` of the table's own descriptor), the
//! folio lock, and the large-mapcount locks.
//!
//! Each lock names the [`Structure`] its word belongs to: every try, every
//! look while spinning and the unlock are accesses to the word's line
//! ([`super::cacheline`]), so on simulated CPUs a contended lock's line
//! moves between the waiters and the holder as a real one does.

use super::atomic::{AtomicU64, Ordering, Ordering::*};
use super::cacheline::{self, Structure};
use super::{backoff, sleep_done, sleep_wait, wake_waiters};

/// A held bit lock (include/linux/bit_spinlock.h); released on drop
/// (`__bit_spin_unlock`). Differs from Linux: no preemption to disable, so
/// a waiter yields now and then instead of spinning forever.
pub struct BitSpinLock<'a> {
    word: &'a AtomicU64,
    structure: Structure,
    bit: u64,
    spins: u32,
    /// The unlock's ordering: `Release` (`Relaxed` only in the broken lock).
    release: Ordering,
}

impl<'a> BitSpinLock<'a> {
    /// Spins until bit `bit` of `word`, a word of a line of `s`, is
    /// acquired (`bit_spin_lock`).
    pub fn lock(s: Structure, word: &'a AtomicU64, bit: u32) -> BitSpinLock<'a> {
        Self::lock_ordered(s, word, bit, Acquire)
    }

    /// The broken lock for the loom tests: acquires with `Relaxed`, so a
    /// holder need not see what the previous holder wrote.
    #[cfg(all(test, loom))]
    pub(crate) fn lock_relaxed(word: &'a AtomicU64, bit: u32) -> BitSpinLock<'a> {
        Self::lock_ordered(Structure::Folio, word, bit, Relaxed)
    }

    /// Sleeps until bit `bit` of `word` is acquired, as `folio_lock` waits
    /// for `PG_locked` (`folio_wait_bit_common`): a waiter leaves its CPU
    /// until the unlock wakes it (`folio_unlock` → `folio_wake_bit`). The
    /// PREEMPT_RT alternative seed 003 offers for its compound lock.
    /// Differs from Linux: one wait list per word, not a hashed wait queue
    /// per bit; outside a simulation a waiter spins and yields.
    pub fn lock_sleeping(s: Structure, word: &'a AtomicU64, bit: u32) -> BitSpinLock<'a> {
        let mask = 1u64 << bit;
        let key = word as *const AtomicU64 as usize;
        let mut spins = 0u32;
        cacheline::write(s, word);
        while word.fetch_or(mask, Acquire) & mask != 0 {
            sleep_wait(&mut spins, key, true);
            cacheline::write(s, word);
        }
        sleep_done(spins, key);
        BitSpinLock { word, structure: s, bit: mask, spins, release: Release }
    }

    fn lock_ordered(s: Structure, word: &'a AtomicU64, bit: u32, order: Ordering) -> BitSpinLock<'a> {
        let bit = 1u64 << bit;
        let mut spins = 0u32;
        cacheline::write(s, word);
        while word.fetch_or(bit, order) & bit != 0 {
            loop {
                cacheline::read(s, word);
                if word.load(Relaxed) & bit == 0 {
                    break;
                }
                backoff(&mut spins, word as *const AtomicU64 as usize);
            }
            cacheline::write(s, word);
        }
        let release = if order == Relaxed { Relaxed } else { Release };
        BitSpinLock { word, structure: s, bit, spins, release }
    }

    /// Acquires the bit of `word` (a word of a line of `s`) if it is free
    /// (`bit_spin_trylock`).
    pub fn try_lock(s: Structure, word: &'a AtomicU64, bit: u32) -> Option<BitSpinLock<'a>> {
        let bit = 1u64 << bit;
        cacheline::write(s, word);
        // `then`, not `then_some`: a guard built for a failed attempt would
        // release the holder's lock when dropped.
        let guard = || BitSpinLock { word, structure: s, bit, spins: 0, release: Release };
        (word.fetch_or(bit, Acquire) & bit == 0).then(guard)
    }

    /// Rounds spun waiting for the lock (for the cost counters).
    pub fn spins(&self) -> u64 {
        self.spins as u64
    }
}

impl Drop for BitSpinLock<'_> {
    fn drop(&mut self) {
        cacheline::write(self.structure, self.word);
        self.word.fetch_and(!self.bit, self.release);
        // However it was taken: a trylock's holder wakes `lock_sleeping`'s
        // waiters too (nothing to do when none sleep).
        wake_waiters(self.word as *const AtomicU64 as usize);
    }
}
