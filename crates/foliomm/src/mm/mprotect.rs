//! mm/mprotect.c `mprotect`: the VMAs' protection, then their entries
//! ([`crate::memory::change_protection`]).

use super::range_end;
use super::vma::{hugetlb_may_split, merge_around};
use crate::memory::change_protection::change_protection;
use crate::memory::hugetlb::with_unshare_locks;
use crate::mm_types::{vm, Mm, Prot};
use crate::{Errno, Result};

impl Mm {
    /// `mprotect(addr, len, prot)`. Differs from Linux: a range with a hole
    /// fails with ENOMEM before anything changes (Linux changes the VMAs up
    /// to the hole first).
    pub fn mprotect(&self, addr: u64, len: u64, prot: Prot) -> Result<()> {
        let end = range_end(addr, len)?;
        if addr == end {
            return Ok(());
        }
        let mut vmas = self.mmap_write_lock();
        if !vmas.covers(addr, end) {
            return Err(Errno::ENOMEM);
        }
        if !hugetlb_may_split(&vmas, addr) || !hugetlb_may_split(&vmas, end) {
            return Err(Errno::EINVAL);
        }
        let new_flags = |flags: u32| (flags & !vm::PROT_MASK) | (prot.0 & vm::PROT_MASK);
        self.split_for_change(&mut vmas, addr, end, new_flags)?;
        let mut changed = false;
        for v in vmas.overlapping(addr, end) {
            let flags = new_flags(v.flags());
            if flags != v.flags() {
                vmas.start_write(v);
                v.set_flags(flags);
                // hugetlb_change_protection() may unshare PMD tables.
                changed |= with_unshare_locks(&self.kernel, v, || change_protection(&self.kernel, self, v));
            }
        }
        if changed {
            self.tlb.flush_range(&self.kernel.stats, addr, end);
        }
        merge_around(&mut vmas, addr, end);
        Ok(())
    }
}
