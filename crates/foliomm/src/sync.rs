//! Locking primitives the kernel uses on page descriptors.
//!
//! [`BitSpinLock`] models `bit_spin_lock()` / `__bit_spin_unlock()`
//! (include/linux/bit_spinlock.h): one bit of an atomic word is the lock. It
//! serves as the split page-table lock (`ptdesc->ptl`, here `PG_locked` of the
//! table's own descriptor) and as the folio's large-mapcount lock. Unlike the
//! kernel, a waiter yields the CPU after spinning a while, because model threads
//! can be preempted while holding the lock.

use std::sync::atomic::{AtomicU64, Ordering::*};

/// A held bit lock (include/linux/bit_spinlock.h); released on drop
/// (`__bit_spin_unlock`). Differs from Linux: no preemption to disable, so
/// a waiter yields now and then instead of spinning forever.
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
                backoff(&mut spins);
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

/// Seed 000's "atomic seqcount": a sequence count whose write side is an
/// atomic increment, so that several writers may be inside at once, while
/// readers retry whenever a writer was inside or the sequence moved. A writer
/// that finds nobody else inside enters exclusively and may update the
/// protected values with plain loads and stores instead of atomic
/// read-modify-writes; shared writers wait until it leaves.
///
/// The 32-bit word holds the number of writers inside (bits 0..15), the
/// exclusive flag (bit 15) and the sequence (bits 16..32). Differs from the
/// seed: the counter is one i32 of the memmap, and waiting spins and yields.
pub struct AtomicSeqcount<'a>(pub &'a std::sync::atomic::AtomicI32);

const WRITERS: u32 = 0x7fff;
const EXCLUSIVE: u32 = 0x8000;
const SEQ_ONE: u32 = 0x1_0000;

thread_local! {
    static SPINS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Rounds this thread has spun waiting for locks and seqcounts since the
/// last call (for the cost counters).
pub fn take_spins() -> u64 {
    SPINS.with(|s| s.replace(0))
}

/// One round of waiting: spin, and every 64th round yield the CPU (model
/// threads may be preempted while holding what we wait for).
fn backoff(spins: &mut u32) {
    SPINS.with(|s| s.set(s.get() + 1));
    *spins += 1;
    if spins.is_multiple_of(64) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

impl AtomicSeqcount<'_> {
    /// Enters the write side; returns true if the writer is alone
    /// (exclusive) and may use plain updates.
    pub fn write_begin(&self) -> bool {
        let mut spins = 0;
        loop {
            let s = self.0.load(Relaxed) as u32;
            if s & EXCLUSIVE != 0 {
                backoff(&mut spins);
                continue;
            }
            let (new, exclusive) = if s & WRITERS == 0 { (s | EXCLUSIVE | 1, true) } else { (s + 1, false) };
            if self.0.compare_exchange_weak(s as i32, new as i32, Acquire, Relaxed).is_ok() {
                return exclusive;
            }
        }
    }

    /// Leaves the write side, moving the sequence on.
    pub fn write_end(&self, exclusive: bool) {
        if exclusive {
            // Nobody else can be inside: a plain store ends the section.
            let s = self.0.load(Relaxed) as u32;
            self.0.store(((s & !(EXCLUSIVE | WRITERS)).wrapping_add(SEQ_ONE)) as i32, Release);
        } else {
            self.0.fetch_add(SEQ_ONE.wrapping_sub(1) as i32, Release);
        }
    }

    /// Reads a consistent snapshot with `read`, retrying while writers are
    /// inside or a write happened meanwhile.
    pub fn read<T>(&self, read: impl Fn() -> T) -> T {
        let mut spins = 0;
        loop {
            let s1 = self.0.load(Acquire) as u32;
            if s1 & (WRITERS | EXCLUSIVE) != 0 {
                backoff(&mut spins);
                continue;
            }
            let v = read();
            std::sync::atomic::fence(Acquire);
            if self.0.load(Relaxed) as u32 == s1 {
                return v;
            }
        }
    }

    /// Whether no writer is inside (for the checker at a quiescent point).
    pub fn is_idle(&self) -> bool {
        self.0.load(Acquire) as u32 & (WRITERS | EXCLUSIVE) == 0
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
    fn seqcount_readers_never_see_a_torn_pair() {
        // Writers keep two values equal; readers must never see them differ.
        let seq = std::sync::atomic::AtomicI32::new(0);
        let (a, b) = (AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        let sc = AtomicSeqcount(&seq);
                        let excl = sc.write_begin();
                        if excl {
                            a.store(a.load(Relaxed) + 1, Relaxed);
                            b.store(b.load(Relaxed) + 1, Relaxed);
                        } else {
                            a.fetch_add(1, Relaxed);
                            b.fetch_add(1, Relaxed);
                        }
                        sc.write_end(excl);
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..20_000 {
                    let (x, y) = AtomicSeqcount(&seq).read(|| (a.load(Relaxed), b.load(Relaxed)));
                    assert_eq!(x, y, "a reader saw a half-done update");
                }
            });
        });
        assert_eq!(a.load(Relaxed), 40_000, "no update was lost");
        assert!(AtomicSeqcount(&seq).is_idle());
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
