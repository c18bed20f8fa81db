//! The seam through which a page fault gets its VMA (seed 004). A VMA-lock
//! design decides what keeps the VMA stable while the fault works: the whole
//! `mmap_lock` for read (before 6.4: the only design so far), a per-VMA
//! rwsem (6.4-6.14) or the VMA's reference count (6.15+), each falling back
//! to the `mmap_lock` when the VMA cannot be locked alone.

use super::{Mm, Vma, Vmas};
use crate::kernel::VmaLockDesign;
use crate::sync::{Arc, RwLockReadGuard};
use crate::{Errno, Result};

/// A VMA held stable for a fault, and what holds it; released on drop.
/// Under `mmap-lock` the guard is the mmap_lock itself, and the VMA is
/// looked up in the tree it guards (no reference count is taken).
pub struct FaultVma<'a> {
    mmap_lock: RwLockReadGuard<'a, Vmas>,
    start: u64,
}

impl FaultVma<'_> {
    /// The locked VMA.
    pub fn vma(&self) -> &Arc<Vma> {
        self.mmap_lock.get(self.start).expect("the mmap_lock keeps the VMA in the tree")
    }
}

impl Mm {
    /// The VMA containing `addr`, locked for a fault as the machine's
    /// VMA-lock design says (`lock_vma_under_rcu`, or `mmap_read_lock` +
    /// `vma_lookup`); EFAULT when no VMA contains it.
    pub fn lock_vma_for_fault(&self, addr: u64) -> Result<FaultVma<'_>> {
        match self.kernel.config.vma_lock {
            VmaLockDesign::MmapLock => {
                let vmas = self.mmap_read_lock();
                let start = vmas.find(addr).ok_or(Errno::EFAULT)?.start();
                Ok(FaultVma { mmap_lock: vmas, start })
            }
        }
    }
}
