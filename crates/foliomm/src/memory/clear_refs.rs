//! fs/proc/task_mmu.c `clear_refs_pte_range` for `CLEAR_REFS_SOFT_DIRTY`
//! (`echo 4 > /proc/PID/clear_refs`): every entry loses its soft-dirty
//! bit, and a present one its write permission, so that the next write
//! faults and marks it again (the MMU's own dirty bit never sets
//! soft-dirty). The VMA side is [`crate::mm::Mm::clear_refs_soft_dirty`].

use crate::arch::pmd_addr_end;
use crate::folio::Folio;
use crate::kernel::Kernel;
use crate::mm_types::{vm, Mm, Vma};
use crate::pgtable::{pte_lockptr, walk_pmd};
use crate::sync::atomic::Ordering::Relaxed;

/// `clear_soft_dirty` and `clear_soft_dirty_pmd` over every entry of
/// `vma`. A hugetlb VMA is not walked (the walk has no `hugetlb_entry`):
/// its entries keep their bits, which pagemap never reports. A writable
/// PTE of a private mapping whose page may be pinned, in an MM that has
/// pinned pages, is left as it is (`pte_is_pinned`): write-protecting it
/// would make the next write copy the page away from the pin.
pub(crate) fn clear_soft_dirty_vma(k: &Kernel, mm: &Mm, vma: &Vma) {
    if vma.is_hugetlb() {
        return;
    }
    let phys = &k.phys;
    let cow = !vma.shared() && vma.flags() & vm::NO_MAYWRITE == 0;
    let has_pinned = mm.has_pinned.load(Relaxed);
    let pinned = |p: crate::arch::Pte| {
        p.write() && cow && has_pinned && !p.special() && Folio::containing(phys, p.pfn()).maybe_dma_pinned()
    };
    let mut addr = vma.start();
    while addr < vma.end() {
        let next = pmd_addr_end(addr, vma.end());
        let Some(pmd) = walk_pmd(phys, mm.pgd, addr) else {
            addr = next;
            continue;
        };
        let ptl = pte_lockptr(phys, pmd.table).lock();
        let e = pmd.load(phys);
        if e.huge() {
            pmd.store(phys, e.clear_soft_dirty());
        } else if !e.is_none() {
            drop(ptl);
            let table = e.pfn();
            let _ptl = pte_lockptr(phys, table).lock();
            super::change_protection::change_pte_range(phys, table, addr, next, |p| match pinned(p) {
                true => p,
                false => p.clear_soft_dirty(),
            });
        }
        addr = next;
    }
}
