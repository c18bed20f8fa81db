//! mm/mlock.c `mlock` and `munlock`: `VM_LOCKED` on the VMAs of a range
//! (`apply_vma_lock_flags`, `mlock_fixup`), then, for `mlock`, every page
//! faulted in (`__mm_populate`).
//!
//! `mlock_vma_pages_range` drains the CPU's LRU batches around its walk,
//! which sends each folio already mapped through the `mlock` batch; the
//! model only drains (the walk's entries would leave nothing behind).
//!
//! Differs from Linux: no unevictable list and no `Mlocked` page counts;
//! no `RLIMIT_MEMLOCK` (the model runs as if with `CAP_IPC_LOCK`); no
//! `MLOCK_ONFAULT`.

use super::range_end;
use super::vma::{covered_from, merge_around, set_vma_flags};
use crate::arch::PAGE_SIZE;
use crate::mm_types::{vm, Mm};
use crate::{Errno, Result};

impl Mm {
    /// `mlock(addr, len)` (`lock`) or `munlock(addr, len)`: the range grows
    /// to whole pages; the VMAs from `addr` on get (or lose) `VM_LOCKED`
    /// in address order up to the first hole, which fails the call with
    /// ENOMEM after the ones before changed, as `apply_vma_lock_flags`
    /// leaves them (a hugetlb VMA is never marked, as `mlock_fixup` skips
    /// it). Then `mlock` faults every page in, for write where the mapping
    /// is private and writable (breaking COW), for read elsewhere; a fault
    /// that fails makes it ENOMEM (`__mlock_posix_error_return`).
    pub fn mlock(&self, addr: u64, len: u64, lock: bool) -> Result<()> {
        let start = addr & !(PAGE_SIZE - 1);
        let len = len.checked_add(addr - start).and_then(|l| l.checked_next_multiple_of(PAGE_SIZE));
        let end = range_end(start, len.ok_or(Errno::EINVAL)?).map_err(|_| Errno::EINVAL)?;
        if start == end {
            return Ok(());
        }
        {
            let mut vmas = self.mmap_write_lock();
            if vmas.find(start).is_none() {
                return Err(Errno::ENOMEM);
            }
            let reach = covered_from(&vmas, start, end);
            let new_flags = |f: u32| match (f & vm::HUGETLB != 0, lock) {
                (true, _) => f,
                (false, true) => f | vm::LOCKED,
                (false, false) => f & !vm::LOCKED,
            };
            self.split_for_change(&mut vmas, start, reach, new_flags)?;
            let changed = set_vma_flags(&mut vmas, start, reach, new_flags);
            if !changed.is_empty() {
                // mlock_vma_pages_range() drains this CPU's LRU batches
                // before and after its walk (whose mlock batch entries the
                // second drain moves, so the model makes none).
                self.kernel.lru_add_drain();
            }
            merge_around(&mut vmas, start, reach, self.kernel.config.release(), &changed);
            if reach < end {
                return Err(Errno::ENOMEM);
            }
        }
        if lock {
            let vmas = self.mmap_read_lock();
            self.populate(&vmas, start, end).map_err(|_| Errno::ENOMEM)?;
        }
        Ok(())
    }
}
