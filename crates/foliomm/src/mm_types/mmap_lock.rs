//! `mm->mmap_lock` (include/linux/mmap_lock.h): a reader/writer semaphore
//! guarding the VMA tree, with `mm->mm_lock_seq`, the sequence that is odd
//! while the lock is held for write. `mmap_write_unlock` moves the sequence
//! on (`vma_end_write_all`), which releases every VMA write lock
//! (`vma_start_write`) taken under it at once.
//!
//! Differs from Linux: the semaphore is `std`'s (or loom's) `RwLock`, whose
//! guard also gives access to what it guards ([`Vmas`]). The semaphore and
//! the sequence are in separate cache lines, as in `struct mm_struct`; both
//! are accounted ([`cacheline`]).

use arc_swap::ArcSwap;

use super::vma_tree::VmaMap;
use super::{VmaCache, Vmas};
use crate::sync::atomic::{AtomicU64, Ordering::*};
use crate::sync::cacheline::{self, Aligned, Locked, Structure};
use crate::sync::{self, Arc, Downgraded, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The mmap_lock, its sequence, and the tree it publishes to lockless readers.
pub(super) struct MmapLock {
    sem: RwLock<Vmas>,
    /// `mm_lock_seq`.
    seq: Aligned<AtomicU64>,
    /// The VMA tree as `lock_vma_under_rcu` walks it.
    pub(super) published: Arc<ArcSwap<VmaMap>>,
}

impl MmapLock {
    pub(super) fn new(mm: u64, cache: Arc<VmaCache>) -> MmapLock {
        let published = Arc::new(ArcSwap::from_pointee(VmaMap::new()));
        MmapLock {
            sem: RwLock::new(Vmas::new(mm, cache, published.clone())),
            seq: Aligned(AtomicU64::new(0)),
            published,
        }
    }

    /// `mmap_read_lock`.
    pub(super) fn read(&self) -> MmapReadGuard<'_> {
        let vmas = Locked::take(Structure::MmapLock, &self.sem, || self.sem.read().unwrap());
        MmapReadGuard { vmas, _tree: std::marker::PhantomData }
    }

    /// `mmap_read_trylock`.
    pub(super) fn try_read(&self) -> Option<MmapReadGuard<'_>> {
        let vmas = Locked::try_take(Structure::MmapLock, &self.sem, || self.sem.try_read().ok())?;
        Some(MmapReadGuard { vmas, _tree: std::marker::PhantomData })
    }

    /// `mmap_write_lock`: the semaphore, then a new (odd) sequence
    /// (`mm_lock_seqcount_begin`).
    pub(super) fn write(&self) -> MmapWriteGuard<'_> {
        let mut vmas = Locked::take(Structure::MmapLock, &self.sem, || self.sem.write().unwrap());
        cacheline::write(Structure::MmLockSeq, &self.seq.0);
        vmas.write_seq = self.seq.fetch_add(1, AcqRel) + 1;
        MmapWriteGuard { vmas: Some(vmas), seq: &self.seq }
    }

    /// `mm_lock_seq`, for `vma_start_read`.
    pub(super) fn seq(&self) -> &AtomicU64 {
        &self.seq
    }
}

/// The mmap_lock held for read; dropping it is `mmap_read_unlock` (`up_read`:
/// another write of the semaphore's line, once it is let go). `G` is the
/// rwsem's guard: a read guard, or a downgraded write hold
/// ([`MmapDowngradedGuard`]).
pub struct MmapReadGuard<'a, G = RwLockReadGuard<'a, Vmas>> {
    vmas: Locked<G>,
    _tree: std::marker::PhantomData<&'a Vmas>,
}

/// The mmap_lock held for read after `mmap_write_downgrade`.
pub type MmapDowngradedGuard<'a> = MmapReadGuard<'a, Downgraded<'a, Vmas>>;

impl<G: std::ops::Deref<Target = Vmas>> std::ops::Deref for MmapReadGuard<'_, G> {
    type Target = Vmas;
    fn deref(&self) -> &Vmas {
        &self.vmas
    }
}

/// The mmap_lock held for write; dropping it is `mmap_write_unlock`.
pub struct MmapWriteGuard<'a> {
    /// Held until dropped or downgraded.
    vmas: Option<Locked<RwLockWriteGuard<'a, Vmas>>>,
    seq: &'a AtomicU64,
}

impl std::ops::Deref for MmapWriteGuard<'_> {
    type Target = Vmas;
    fn deref(&self) -> &Vmas {
        self.vmas.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for MmapWriteGuard<'_> {
    fn deref_mut(&mut self) -> &mut Vmas {
        self.vmas.as_mut().expect("held until dropped")
    }
}

impl<'a> MmapWriteGuard<'a> {
    /// `vma_end_write_all`: the sequence becomes even, which releases
    /// every VMA write lock of the epoch.
    fn end_write_all(&mut self) {
        if let Some(vmas) = self.vmas.as_mut() {
            vmas.write_seq = 0;
            cacheline::write(Structure::MmLockSeq, self.seq);
            self.seq.fetch_add(1, Release);
        }
    }

    /// `mmap_write_downgrade`: `vma_end_write_all`, then the semaphore
    /// becomes a read hold (`downgrade_write`), so that faults and other
    /// readers run while the holder finishes (munmap's zap).
    pub fn downgrade(mut self) -> MmapDowngradedGuard<'a> {
        self.end_write_all();
        let vmas = self.vmas.take().expect("held until dropped");
        MmapReadGuard { vmas: vmas.map(sync::downgrade), _tree: std::marker::PhantomData }
    }
}

impl Drop for MmapWriteGuard<'_> {
    /// `vma_end_write_all`, then `up_write` (when `vmas` goes).
    fn drop(&mut self) {
        self.end_write_all();
    }
}
