//! Locking primitives the kernel uses on page descriptors.
//!
//! [`BitSpinLock`] models `bit_spin_lock()` / `__bit_spin_unlock()`
//! (include/linux/bit_spinlock.h): one bit of an atomic word is the lock. It
//! serves as the split page-table lock (`ptdesc->ptl`, here `PG_locked` of the
//! table's own descriptor) and as the folio's large-mapcount lock. Unlike the
//! kernel, a waiter yields the CPU after spinning a while, because model threads
//! can be preempted while holding the lock.

use std::sync::atomic::{AtomicU64, Ordering::*};

/// A held bit lock; released on drop.
pub struct BitSpinLock<'a> {
    word: &'a AtomicU64,
    bit: u64,
}

impl<'a> BitSpinLock<'a> {
    /// Spins until bit `bit` of `word` is acquired (`bit_spin_lock`).
    pub fn lock(word: &'a AtomicU64, bit: u32) -> BitSpinLock<'a> {
        let bit = 1u64 << bit;
        let mut spins = 0u32;
        while word.fetch_or(bit, Acquire) & bit != 0 {
            while word.load(Relaxed) & bit != 0 {
                spins += 1;
                if spins.is_multiple_of(64) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        BitSpinLock { word, bit }
    }

    /// Acquires the bit if it is free (`bit_spin_trylock`).
    pub fn try_lock(word: &'a AtomicU64, bit: u32) -> Option<BitSpinLock<'a>> {
        let bit = 1u64 << bit;
        (word.fetch_or(bit, Acquire) & bit == 0).then_some(BitSpinLock { word, bit })
    }
}

impl Drop for BitSpinLock<'_> {
    fn drop(&mut self) {
        self.word.fetch_and(!self.bit, Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn excludes_other_holders() {
        let w = AtomicU64::new(0);
        let g = BitSpinLock::lock(&w, 3);
        assert!(BitSpinLock::try_lock(&w, 3).is_none());
        assert!(BitSpinLock::try_lock(&w, 4).is_some(), "other bits are independent");
        drop(g);
        assert!(BitSpinLock::try_lock(&w, 3).is_some());
    }

    #[test]
    fn serialises_increments() {
        let w = AtomicU64::new(0);
        let n = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        let _g = BitSpinLock::lock(&w, 0);
                        let v = n.load(Relaxed);
                        n.store(v + 1, Relaxed);
                    }
                });
            }
        });
        assert_eq!(n.load(Relaxed), 20_000);
    }
}
