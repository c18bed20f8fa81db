//! mm/mprotect.c `mprotect`: the VMAs' protection, then their entries
//! ([`crate::memory::change_protection`]).

use super::range_end;
use super::vma::{covered_from, hugetlb_may_split, merge_around, set_vma_flags};
use crate::memory::change_protection::change_protection;
use crate::memory::hugetlb::with_unshare_locks;
use crate::mm_types::{vm, Mm, Prot};
use crate::{Errno, Result};

impl Mm {
    /// `mprotect(addr, len, prot)` as `do_mprotect_pkey` walks it: nothing
    /// changes if no VMA holds `addr` (ENOMEM) or a hugetlb VMA would split
    /// there off a huge-page boundary (EINVAL); otherwise the VMAs change in
    /// address order up to the first hole, which fails the call with ENOMEM
    /// after the ones before it changed, as Linux leaves them. A hugetlb
    /// VMA that would split off a boundary at `end` fails with EINVAL, the
    /// VMAs before it changed (Linux may also have split it at its start).
    /// Asking for write where a VMA may not become writable (a shared
    /// mapping of a write-sealed memfd) stops there with EACCES.
    pub fn mprotect(&self, addr: u64, len: u64, prot: Prot) -> Result<()> {
        let end = range_end(addr, len)?;
        if addr == end {
            return Ok(());
        }
        let mut vmas = self.mmap_write_lock();
        if vmas.find(addr).is_none() {
            return Err(Errno::ENOMEM);
        }
        if !hugetlb_may_split(&vmas, addr) {
            return Err(Errno::EINVAL);
        }
        let reach = covered_from(&vmas, addr, end);
        // The first VMA that may not become writable (VM_MAYWRITE clear).
        let denied = (prot.0 & Prot::WRITE != 0)
            .then(|| vmas.overlapping(addr, reach).find(|v| v.flags() & vm::NO_MAYWRITE != 0).map(|v| v.start()))
            .flatten();
        let (stop, failed) = match (denied, reach) {
            (Some(start), _) => (start.max(addr), Some(Errno::EACCES)),
            (None, r) if r < end => (r, Some(Errno::ENOMEM)),
            _ if !hugetlb_may_split(&vmas, end) => {
                (vmas.find(end).map_or(end, |v| v.start().max(addr)), Some(Errno::EINVAL))
            }
            _ => (end, None),
        };
        if stop > addr {
            self.protect_range(&mut vmas, addr, stop, prot)?;
        }
        failed.map_or(Ok(()), Err)
    }

    /// `mprotect_fixup` of every VMA in `[addr, end)` (which VMAs cover
    /// without a hole), then the entries and one TLB flush. A private
    /// `VM_LOCKED` VMA that becomes writable is then faulted in for write
    /// (`populate_vma_page_range`: its COW is broken now rather than by a
    /// major fault later), errors ignored as Linux ignores them.
    fn protect_range(&self, vmas: &mut crate::mm_types::Vmas, addr: u64, end: u64, prot: Prot) -> Result<()> {
        let new_flags = |flags: u32| (flags & !vm::PROT_MASK) | (prot.0 & vm::PROT_MASK);
        self.split_for_change(vmas, addr, end, new_flags)?;
        let locked_made_writable: Vec<(u64, u64)> = vmas
            .overlapping(addr, end)
            .filter(|v| v.flags() & (vm::WRITE | vm::SHARED | vm::LOCKED) == vm::LOCKED)
            .filter(|_| prot.0 & Prot::WRITE != 0)
            .map(|v| (v.start().max(addr), v.end().min(end)))
            .collect();
        let changed = set_vma_flags(vmas, addr, end, new_flags);
        let mut flush = false;
        for &start in &changed {
            let v = vmas.get(start).expect("a VMA just changed").clone();
            // hugetlb_change_protection() may unshare PMD tables.
            flush |= with_unshare_locks(&self.kernel, &v, || change_protection(&self.kernel, self, &v));
        }
        if flush {
            self.tlb.flush_range(&self.kernel.stats, addr, end);
        }
        merge_around(vmas, addr, end, self.kernel.config.release(), &changed);
        for (start, stop) in locked_made_writable {
            let _ = self.populate(vmas, start, stop);
        }
        Ok(())
    }
}
