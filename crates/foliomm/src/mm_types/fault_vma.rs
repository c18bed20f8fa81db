//! How a page fault gets its VMA held stable (seed 004): `lock_vma_under_rcu`
//! (mm/mmap_lock.c) under the per-VMA lock designs, `lock_mm_and_find_vma`
//! (the mmap_lock for read) under `mmap-lock` and as every design's
//! fallback, and `vmf_anon_prepare`'s trip back to the mmap_lock. Counts
//! the kernel's `VMA_LOCK_*` events.

use super::vma_lock::ReadFailure;
use super::{vma_tree, Mm, MmapReadGuard, Vma};
use crate::kernel::{Incident, Kernel, Stats, VmaLockDesign};
use crate::sync::atomic::AtomicU64;
use crate::sync::Arc;
use crate::{Errno, Result};

/// A VMA held stable for a fault, and what holds it; released on drop.
pub struct FaultVma<'a> {
    vma: Arc<Vma>,
    hold: Hold<'a>,
}

enum Hold<'a> {
    /// The mmap_lock for read.
    MmapLock { _vmas: MmapReadGuard<'a> },
    /// The VMA's own lock, read-held; dropping it counts `VMA_LOCK_SUCCESS`.
    VmaLock(&'a Mm),
    /// The VMA's own lock, read-held by an ioctl (`uffd_lock_vma`), which
    /// counts no fault event.
    IoctlVmaLock,
    /// The VMA lock given up for a retry.
    Released,
}

impl FaultVma<'_> {
    /// The locked VMA.
    pub fn vma(&self) -> &Arc<Vma> {
        &self.vma
    }

    /// `vmf_anon_prepare` for a fault that will allocate an anonymous
    /// folio (`allocates`): a VMA without an anon_vma gets one, which under
    /// the VMA lock alone needs the mmap_lock too (setting it up may look
    /// at neighbouring VMAs). Returns false if that lock was busy: the
    /// fault must be redone under the mmap_lock (`VM_FAULT_RETRY`; the
    /// caller drops this and counts the retry with [`Mm::lock_mm_and_find_vma`]).
    /// foliomm asks at the start of the fault rather than at the allocation.
    pub fn anon_prepare(&self, allocates: bool) -> bool {
        let Hold::VmaLock(mm) = self.hold else {
            return true;
        };
        if !allocates || self.vma.anon_vma() != 0 {
            return true;
        }
        match mm.mmap_read_trylock() {
            Some(_held) => {
                mm.anon_vma_prepare(&self.vma);
                true
            }
            None => false,
        }
    }

    /// The same hold for an ioctl rather than a fault: releasing it counts
    /// no `VMA_LOCK_SUCCESS`.
    pub fn for_ioctl(mut self) -> Self {
        if let Hold::VmaLock(_) = self.hold {
            self.hold = Hold::IoctlVmaLock;
        }
        self
    }

    /// A VMA held under the mmap_lock, read-locked on its own and the
    /// mmap_lock let go (`vma_start_read_locked` + `mmap_read_unlock`, as
    /// `uffd_lock_vma`'s fallback does); EAGAIN if the VMA lock refuses (the
    /// reader limit), the same hold if it is not the mmap_lock's.
    pub fn into_vma_lock(mut self) -> Result<Self> {
        if let Hold::MmapLock { .. } = self.hold {
            self.vma.start_read_locked().map_err(|_| Errno::EAGAIN)?;
            self.hold = Hold::IoctlVmaLock;
        }
        Ok(self)
    }

    /// Gives up the VMA lock for a retry under the mmap_lock (`VMA_LOCK_RETRY`).
    pub fn retry(mut self) {
        if let Hold::VmaLock(mm) = self.hold {
            Stats::inc(&mm.kernel.stats.vma_lock_retry);
            put_read(&self.vma, mm);
            self.hold = Hold::Released;
        }
    }
}

/// `vma_end_read` of a fault's VMA in `mm`. Under the `vma-put-late-mm`
/// switch `vma_refcount_put` reads `vm_mm` for the wake-up after dropping
/// its reference, as seed 004's v8 did: by then the writer it wakes may
/// have freed the VMA and the cache handed it on, and a read of a VMA freed
/// since is recorded as a use after free.
fn put_read(vma: &Vma, mm: &Mm) {
    let k: &Kernel = &mm.kernel;
    if !k.config.debug.vma_put_late_mm {
        vma.end_read();
        return;
    }
    let frees = vma.frees();
    if vma.end_read() && vma.frees() != frees {
        let what =
            format!("vma_refcount_put read vm_mm (now {}) of a VMA freed after it dropped its reference", vma.mm());
        k.violations.lock().unwrap().push(Incident::UseAfterFree { mm: mm.id, addr: vma.start(), what });
    }
}

impl Drop for FaultVma<'_> {
    fn drop(&mut self) {
        match self.hold {
            Hold::VmaLock(mm) => {
                put_read(&self.vma, mm);
                Stats::inc(&mm.kernel.stats.vma_lock_success);
            }
            Hold::IoctlVmaLock => _ = self.vma.end_read(),
            Hold::MmapLock { .. } | Hold::Released => {}
        }
    }
}

impl Mm {
    /// `lock_mm_and_find_vma`: the mmap_lock for read and the VMA containing
    /// `addr`; EFAULT if none does.
    pub fn lock_mm_and_find_vma(&self, addr: u64) -> Result<FaultVma<'_>> {
        let vmas = self.mmap_read_lock();
        let vma = vmas.find(addr).ok_or(Errno::EFAULT)?.clone();
        vma.account_fault_reads();
        Ok(FaultVma { vma, hold: Hold::MmapLock { _vmas: vmas } })
    }

    /// `uffd_move_lock`'s fallback (`find_vmas_mm_locked`, then
    /// `vma_start_read_locked` and `_nested`): under the mmap_lock for
    /// read, the VMAs holding `dst` and `src` (ENOENT if either is
    /// missing), the first with an anon_vma made if private, each
    /// read-locked on its own (the second only if it is another VMA;
    /// EAGAIN at the reader limit), then the mmap_lock let go.
    pub fn lock_two_vmas(&self, dst: u64, src: u64) -> Result<(FaultVma<'_>, Option<FaultVma<'_>>)> {
        let vmas = self.mmap_read_lock();
        let d = vmas.find(dst).ok_or(Errno::ENOENT)?.clone();
        let s = vmas.find(src).ok_or(Errno::ENOENT)?.clone();
        if !d.shared() {
            self.anon_vma_prepare(&d);
        }
        d.start_read_locked().map_err(|_| Errno::EAGAIN)?;
        let d = FaultVma { vma: d, hold: Hold::IoctlVmaLock };
        if Arc::ptr_eq(d.vma(), &s) {
            return Ok((d, None));
        }
        s.start_read_locked().map_err(|_| Errno::EAGAIN)?;
        Ok((d, Some(FaultVma { vma: s, hold: Hold::IoctlVmaLock })))
    }

    /// The VMA containing `addr` in the published tree, found without a
    /// lock (an RCU walk): it may be leaving the tree, or be another VMA by
    /// the time the caller looks (compare its id).
    pub(crate) fn published_vma(&self, addr: u64) -> Option<Arc<Vma>> {
        vma_tree::find(&self.mmap_lock.published.load(), addr).cloned()
    }

    /// `lock_vma_under_rcu`: finds the VMA containing `addr` in the
    /// published tree without the mmap_lock and read-locks it; `None` (and
    /// `VMA_LOCK_ABORT`) if there is none, it is write-locked, or once held
    /// it turns out to be another VMA now (reused for another MM or range:
    /// the revalidation the `no-vma-revalidate` switch skips). A VMA
    /// detached under our feet is looked up again (`VMA_LOCK_MISS`).
    /// Always `None` under `mmap-lock`; `None` for a VMA registered with a
    /// userfaultfd in 6.4 and 6.5.
    pub fn lock_vma_under_rcu(&self, addr: u64) -> Option<FaultVma<'_>> {
        let k: &Kernel = &self.kernel;
        if k.config.vma_lock == VmaLockDesign::MmapLock {
            return None;
        }
        let revalidate = !k.config.debug.no_vma_revalidate;
        let lookup = || vma_tree::find(&self.mmap_lock.published.load(), addr).cloned();
        let mut misses = 0;
        let got = lock_under_rcu(lookup, self.serial, self.mmap_lock.seq(), addr, revalidate, &mut misses);
        Stats::add(&k.stats.vma_lock_miss, misses);
        match got {
            // 6.4 and 6.5 send faults on a VMA registered with a
            // userfaultfd to the mmap_lock.
            Some(vma) if vma.userfaultfd_armed() && k.config.release().vma_lock_refuses_uffd() => {
                vma.end_read();
                Stats::inc(&k.stats.vma_lock_abort);
                None
            }
            Some(vma) => Some(FaultVma { vma, hold: Hold::VmaLock(self) }),
            None => {
                Stats::inc(&k.stats.vma_lock_abort);
                None
            }
        }
    }
}

/// The body of `lock_vma_under_rcu` for MM `mm` (serial) whose
/// `mm_lock_seq` is `mm_seq`, with `lookup` as the lockless tree walk:
/// the VMA containing `addr`, read-locked, or `None` (abort). Counts the
/// lookups repeated because the VMA was detached in `misses`.
pub(super) fn lock_under_rcu(
    lookup: impl Fn() -> Option<Arc<Vma>>,
    mm: u64,
    mm_seq: &AtomicU64,
    addr: u64,
    revalidate: bool,
    misses: &mut u64,
) -> Option<Arc<Vma>> {
    loop {
        let vma = lookup()?;
        match vma.start_read(mm, mm_seq, revalidate) {
            Err(ReadFailure::Detached) => {
                *misses += 1;
                continue;
            }
            Err(ReadFailure::Busy) => return None,
            Ok(()) => {}
        }
        // vma-rwsem: the VMA may have left the tree since the walk.
        if vma.isolated_since_lookup() {
            vma.end_read();
            *misses += 1;
            continue;
        }
        vma.account_fault_reads();
        if revalidate && !vma.contains(addr) {
            vma.end_read();
            return None;
        }
        return Some(vma);
    }
}

impl Mm {
    /// The VMAs lockless readers see now (the published tree), in address order.
    pub fn published_vmas(&self) -> Vec<Arc<Vma>> {
        self.mmap_lock.published.load().values().cloned().collect()
    }
}
