//! The per-VMA lock (seed 004): `vma_start_read`, `vma_end_read`,
//! `vma_start_write`, `vma_mark_attached`, `vma_mark_detached`
//! (include/linux/mmap_lock.h, mm/mmap_lock.c), in the two designs that
//! have one. Both keep `vm_lock_seq`: a VMA is write-locked while it equals
//! the MM's `mm_lock_seq`, so `mmap_write_unlock`, which moves the sequence
//! on, drops every VMA write lock of the MM at once.
//!
//! - `vma-rwsem` (6.4 to 6.14): a separately allocated rw semaphore
//!   (`vma->vm_lock`) that readers try-lock and a writer takes only long
//!   enough to set `vm_lock_seq`, plus a `detached` flag.
//! - `vma-refcount` (6.15+): `vm_refcnt`, where 0 means detached, each
//!   reader adds 1 (never from 0, never past `VMA_REF_LIMIT`), and a writer
//!   adds `VMA_LOCK_OFFSET` to shut readers out and waits for those inside.
//!
//! A writer waiting for readers sleeps on `mm->vma_writer_wait` on
//! simulated CPUs, keyed by the VMA's `vm_refcnt`, and the reader whose
//! `vma_refcount_put` leaves only the writer wakes it.
//!
//! Differs from Linux: outside a simulation such a writer spins and
//! yields instead of sleeping, so readers wake no one.
//!
//! Cache lines ([`cacheline`]): the lock word and `vm_lock_seq` are
//! accounted where the release's layout puts them ([`super::vma_layout`]):
//! `vm_refcnt` opens the third line of 6.15's VMA; a `vm_lock` rwsem is a
//! 40-byte object of its own slab (6.4 to 6.14's `vma_lock_cachep`), so
//! that each line holds parts of two or three VMAs' locks and faults on
//! neighbouring VMAs bounce it; the `embedded` layout puts the lock word in
//! the first line itself, so every lock taken by one CPU takes the fields
//! from the others (the 6.4 merge window's regression).

use super::vma_layout::Member;
use super::Vma;
use crate::kernel::VmaLockDesign;
use crate::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use crate::sync::cacheline::{self, Aligned};
use crate::sync::{sleep_done, sleep_wait, wake_waiters, RwSem};

/// The writer's share of `vm_refcnt` (`VMA_LOCK_OFFSET`, bit 30).
pub const VMA_LOCK_OFFSET: u32 = 0x4000_0000;
/// Readers a VMA admits at most (`VMA_REF_LIMIT`).
pub const VMA_REF_LIMIT: u32 = VMA_LOCK_OFFSET - 1;
/// `vm_lock_seq` of a VMA not write-locked since it was made (`UINT_MAX`).
const NEVER_LOCKED: u64 = u64::MAX;

/// A VMA's lock state: `vm_lock_seq` and the design's lock.
#[derive(Debug)]
pub struct VmaLock {
    /// `vm_lock_seq`.
    seq: AtomicU64,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// `mmap-lock`: faults hold the mmap_lock; the VMA has no lock of its own.
    None,
    /// `vma-rwsem`: `vma->vm_lock` (its own allocation) and `vma->detached`.
    Rwsem { sem: Box<RwSem>, detached: AtomicBool },
    /// `vma-refcount`: `vm_refcnt`.
    Refcount(Aligned<AtomicU32>),
}

/// Why `vma_start_read` failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFailure {
    /// The VMA was detached after the lookup found it (`-EAGAIN`): look again.
    Detached,
    /// Write-locked, reused by another MM, or at the reader limit (NULL):
    /// fall back to the mmap_lock.
    Busy,
}

impl VmaLock {
    /// A detached VMA's lock.
    pub(super) fn new(design: VmaLockDesign) -> VmaLock {
        let kind = match design {
            VmaLockDesign::MmapLock => Kind::None,
            VmaLockDesign::VmaRwsem => Kind::Rwsem { sem: Box::default(), detached: AtomicBool::new(true) },
            VmaLockDesign::VmaRefcount => Kind::Refcount(Aligned(AtomicU32::new(0))),
        };
        VmaLock { seq: AtomicU64::new(NEVER_LOCKED), kind }
    }

    /// `vma_lock_init` for a VMA handed out by the cache (still detached).
    pub(super) fn init(&self) {
        self.seq.store(NEVER_LOCKED, Relaxed);
    }

    /// Whether no lockless reader can find and lock the VMA (`refcnt == 0`,
    /// or `detached`); always false under `mmap-lock`, which has no state.
    pub fn is_detached(&self) -> bool {
        match &self.kind {
            Kind::None => false,
            Kind::Rwsem { detached, .. } => detached.load(Acquire),
            Kind::Refcount(r) => r.load(Acquire) == 0,
        }
    }

    /// Readers holding the VMA, or `None` under `mmap-lock`. Exact only
    /// when no thread is between its lookup and its revalidation.
    pub fn readers(&self) -> Option<u32> {
        match &self.kind {
            Kind::None => None,
            Kind::Rwsem { sem, .. } => Some(sem.readers()),
            Kind::Refcount(r) => Some(r.load(Relaxed).saturating_sub(1)),
        }
    }
}

impl Vma {
    /// Whether a VMA read-locked after a lockless lookup has left the tree
    /// meanwhile: `vma-rwsem`'s check of `detached` (beside `vm_lock_seq`)
    /// after `down_read` (6.4 to 6.14's `lock_vma_under_rcu`). The refcount
    /// design needs none (a detached VMA's count is 0, and
    /// `vma_start_read`'s increment refused it), nor does `mmap-lock`.
    pub fn isolated_since_lookup(&self) -> bool {
        if !matches!(self.lock.kind, Kind::Rwsem { .. }) {
            return false;
        }
        self.account(&[Member::LockSeq], false);
        self.lock.is_detached()
    }

    /// Accounts reads of `vm_lock_seq` and `mm_lock_seq`.
    fn account_seq_reads(&self, mm_seq: &AtomicU64) {
        self.account(&[Member::LockSeq], false);
        cacheline::read(cacheline::Structure::MmLockSeq, mm_seq);
    }

    /// `vma_start_read`: read-locks the VMA for a fault of the MM whose
    /// `mm_lock_seq` is `mm_seq` and whose serial is `mm`. With
    /// `revalidate` (always, but for the seed-004 debug switch) a VMA now
    /// owned by another MM is refused (the `vm_mm` check Linux 6.17 moved
    /// here from `lock_vma_under_rcu`).
    pub fn start_read(&self, mm: u64, mm_seq: &AtomicU64, revalidate: bool) -> Result<(), ReadFailure> {
        let seq = &self.lock.seq;
        self.account_seq_reads(mm_seq);
        if seq.load(Relaxed) == mm_seq.load(Relaxed) {
            return Err(ReadFailure::Busy);
        }
        self.account_lock_write();
        match &self.lock.kind {
            Kind::None => return Err(ReadFailure::Busy),
            Kind::Rwsem { sem, .. } => {
                if !sem.down_read_trylock() {
                    return Err(ReadFailure::Busy);
                }
                self.account_reader_owner();
            }
            Kind::Refcount(r) => {
                inc_not_zero_limited(r, VMA_REF_LIMIT)?;
                if revalidate && self.mm() != mm {
                    self.end_read();
                    return Err(ReadFailure::Busy);
                }
            }
        }
        // A writer may have locked it between the first check and the hold.
        self.account_seq_reads(mm_seq);
        if seq.load(Relaxed) == mm_seq.load(Acquire) {
            self.end_read();
            return Err(ReadFailure::Busy);
        }
        Ok(())
    }

    /// `vma_start_read_locked`: read-locks the VMA while the caller holds
    /// the mmap_lock (for read), so that no writer can be in: only the
    /// reader limit of the refcount design can refuse it. Busy under
    /// `mmap-lock`, which has no VMA lock.
    pub fn start_read_locked(&self) -> Result<(), ReadFailure> {
        self.account_lock_write();
        match &self.lock.kind {
            Kind::None => Err(ReadFailure::Busy),
            Kind::Rwsem { sem, .. } => {
                sem.down_read_trylock().then_some(()).ok_or(ReadFailure::Busy)?;
                self.account_reader_owner();
                Ok(())
            }
            Kind::Refcount(r) => inc_not_zero_limited(r, VMA_REF_LIMIT),
        }
    }

    /// `vma_end_read` (`vma_refcount_put` / `up_read`), which reads
    /// `vm_mm` (in the VMA's first line) before it lets go. Returns true
    /// if it was the last reader a waiting writer needed, and woke it.
    pub fn end_read(&self) -> bool {
        self.account(&[Member::Mm], false);
        self.account_lock_write();
        match &self.lock.kind {
            Kind::None => false,
            Kind::Rwsem { sem, .. } => {
                sem.up_read();
                false
            }
            Kind::Refcount(r) => {
                // `is_vma_writer_only`: a writer waits and this was the
                // last reader (or the VMA's own reference went first).
                let left = r.fetch_sub(1, Release) - 1;
                let wakes = left & VMA_LOCK_OFFSET != 0 && left <= VMA_LOCK_OFFSET + 1;
                if wakes {
                    wake_waiters(&r.0 as *const AtomicU32 as usize);
                }
                wakes
            }
        }
    }

    /// `vma_start_write` in the write epoch `mm_seq` (the MM's odd
    /// `mm_lock_seq` while its mmap_lock is held for write): waits for the
    /// VMA's readers to leave and marks it write-locked until the epoch
    /// ends. Nothing to wait for on a detached VMA.
    pub(super) fn start_write(&self, mm_seq: u64) {
        let seq = &self.lock.seq;
        if seq.load(Relaxed) == mm_seq {
            return;
        }
        self.account_lock_write();
        self.account(&[Member::LockSeq], true);
        match &self.lock.kind {
            Kind::None => seq.store(mm_seq, Relaxed),
            Kind::Rwsem { sem, .. } => {
                sem.down_write();
                seq.store(mm_seq, Relaxed);
                sem.up_write();
            }
            Kind::Refcount(r) => {
                // __vma_enter_locked(), the VMA's own reference being the 1.
                let locked = wait_readers_out(r, VMA_LOCK_OFFSET + 1);
                seq.store(mm_seq, Relaxed);
                if locked {
                    r.fetch_sub(VMA_LOCK_OFFSET, Release);
                }
            }
        }
    }

    /// `vma_mark_attached`: the write-locked VMA goes into the tree.
    pub(super) fn mark_attached(&self) {
        self.account_lock_write();
        match &self.lock.kind {
            Kind::None => {}
            Kind::Rwsem { detached, .. } => detached.store(false, Release),
            Kind::Refcount(r) => r.store(1, Release),
        }
    }

    /// `vma_mark_detached`: the write-locked VMA has left the tree; once
    /// this returns no reader holds it or can take it.
    pub(super) fn mark_detached(&self) {
        self.account_lock_write();
        match &self.lock.kind {
            Kind::None => {}
            Kind::Rwsem { detached, .. } => detached.store(true, Release),
            Kind::Refcount(r) => {
                if r.fetch_sub(1, AcqRel) != 1 && wait_readers_out(r, VMA_LOCK_OFFSET) {
                    // The readers that were passing through have left.
                    r.fetch_sub(VMA_LOCK_OFFSET, Release);
                }
            }
        }
    }
}

/// `__refcount_inc_not_zero_limited_acquire`: one more reader unless the
/// VMA is detached (0) or the count would pass `limit` (a writer's offset).
fn inc_not_zero_limited(r: &AtomicU32, limit: u32) -> Result<(), ReadFailure> {
    let mut old = r.load(Relaxed);
    loop {
        if old == 0 {
            return Err(ReadFailure::Detached);
        }
        if old >= limit {
            return Err(ReadFailure::Busy);
        }
        match r.compare_exchange_weak(old, old + 1, Acquire, Relaxed) {
            Ok(_) => return Ok(()),
            Err(now) => old = now,
        }
    }
}

/// `__vma_enter_locked`: adds the writer's offset unless the count is 0
/// (returns false: detached, nothing to wait for), then waits until only
/// `target` is left (the readers are gone).
fn wait_readers_out(r: &AtomicU32, target: u32) -> bool {
    let mut old = r.load(Relaxed);
    loop {
        if old == 0 {
            return false;
        }
        match r.compare_exchange_weak(old, old + VMA_LOCK_OFFSET, Acquire, Relaxed) {
            Ok(_) => break,
            Err(now) => old = now,
        }
    }
    let mut spins = 0;
    while r.load(Acquire) != target {
        sleep_wait(&mut spins, r as *const AtomicU32 as usize, true);
    }
    sleep_done(spins, r as *const AtomicU32 as usize);
    true
}

#[cfg(all(test, not(loom), not(shuttle)))]
mod tests {
    use super::*;
    use crate::mm_types::{VmaCache, VmaInit};

    /// Under `vma-refcount` a VMA admits `VMA_REF_LIMIT` references at
    /// most (its own and its readers'): the next reader is refused, by the
    /// fault's `vma_start_read` and by the ioctls' `vma_start_read_locked`
    /// alike (`uffd_lock_vma` then answers EAGAIN), until one leaves.
    #[test]
    fn a_reader_past_the_reference_limit_is_refused() {
        let cache = VmaCache::new(VmaLockDesign::VmaRefcount);
        let v = cache.alloc(VmaInit { mm: 1, start: 0, end: 4096, flags: 0, pgoff: 0, file: None });
        v.start_write(1);
        v.mark_attached();
        let Kind::Refcount(r) = &v.lock.kind else { panic!("a refcount lock") };
        let mm_seq = AtomicU64::new(2);
        r.store(VMA_REF_LIMIT, Relaxed);
        assert_eq!(v.start_read_locked(), Err(ReadFailure::Busy));
        assert_eq!(v.start_read(1, &mm_seq, true), Err(ReadFailure::Busy));
        r.store(VMA_REF_LIMIT - 1, Relaxed);
        assert_eq!(v.start_read_locked(), Ok(()));
        assert_eq!(r.load(Relaxed), VMA_REF_LIMIT);
        v.end_read();
        assert_eq!(v.start_read(1, &mm_seq, true), Ok(()));
    }
}
