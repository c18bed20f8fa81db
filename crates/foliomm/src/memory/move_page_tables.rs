//! mm/mremap.c `move_page_tables`: mremap moving a range's entries to a new
//! address within one MM.

use crate::arch::{pmd_addr_end, pte_index, pud_addr_end, Pte, PAGE_SIZE, PMD_SIZE};
use crate::kernel::Kernel;
use crate::mm_types::{Mm, Vma};
use crate::pgtable::{alloc_pmd, alloc_pte_table, alloc_pud, huge_pud, load, pte_lockptr, store, walk_pmd, PmdSlot};
use crate::tlb::MmuGather;
use crate::Result;

/// `move_page_tables`: moves the entries of `[old, old+len)` to `new`. A huge
/// PMD moves as one entry (with its deposited table) when both addresses are
/// PMD-aligned and the block is whole; otherwise it is split and its PTEs
/// move one by one (`move_ptes`). rmap is unchanged: the same MM maps the
/// same folios. With `clear_uffd_wp` the present entries lose their
/// uffd-wp bit (a VMA that leaves its userfaultfd behind, 6.13 on).
pub(crate) fn move_page_tables(k: &Kernel, mm: &Mm, old: u64, new: u64, len: u64, clear_uffd_wp: bool) -> Result<()> {
    // move_soft_dirty_pte(): a moved page looks written at its new place.
    let moved = |p: Pte| match clear_uffd_wp {
        true => p.clear_uffd_wp().mksoft_dirty(),
        false => p.mksoft_dirty(),
    };
    let phys = &k.phys;
    let mut off = 0;
    while off < len {
        let (src, dst) = (old + off, new + off);
        let step = (pmd_addr_end(src, old + len) - src).min(pmd_addr_end(dst, new + len) - dst);
        let Some(spmd) = walk_pmd(phys, mm.pgd, src) else {
            off += step;
            continue;
        };
        let e = spmd.load(phys);
        if e.huge() && src % PMD_SIZE == 0 && dst % PMD_SIZE == 0 && step == PMD_SIZE {
            let dpmd = alloc_pmd(k, mm.pgd, dst, &mm.page_table_lock)?;
            if super::huge_memory::move_huge_pmd(k, mm, spmd, dpmd, src, dst, &moved) {
                off += step;
                continue;
            }
        }
        if spmd.load(phys).huge() {
            super::huge_memory::split_huge_pmd(k, mm, src);
        }
        let e = spmd.load(phys);
        if !e.is_none() && !e.huge() {
            let dpmd = alloc_pmd(k, mm.pgd, dst, &mm.page_table_lock)?;
            let dtable = alloc_pte_table(k, dpmd)?.expect("mremap destination cannot be huge");
            let stable = e.pfn();
            let _sptl = pte_lockptr(phys, stable).lock();
            let _dptl = (dtable != stable).then(|| pte_lockptr(phys, dtable).lock());
            for i in 0..step / PAGE_SIZE {
                let (s, d) = (src + i * PAGE_SIZE, dst + i * PAGE_SIZE);
                let p = load(phys, stable, pte_index(s));
                if !p.is_none() {
                    store(phys, stable, pte_index(s), Pte::NONE);
                    store(phys, dtable, pte_index(d), moved(p));
                }
            }
        }
        off += step;
    }
    mm.tlb.flush_range(&k.stats, old, old + len);
    Ok(())
}

/// `move_hugetlb_page_tables`: moves the huge entries (PMDs of 2 MiB
/// pages, PUDs of 1 GiB ones) of the hugetlb VMA `v`'s `[old, old+len)` to
/// `new`, both aligned to its page size. A PMD table this MM shares with
/// others is only let go of (`huge_pmd_unshare`): its pages are not moved,
/// and fault in again at the new place from the file.
pub(crate) fn move_hugetlb_page_tables(k: &Kernel, mm: &Mm, v: &Vma, old: u64, new: u64, len: u64) -> Result<()> {
    let phys = &k.phys;
    let size = v.huge_page_size().expect("a hugetlb VMA");
    let mut tlb = MmuGather::new(k, &mm.tlb, false);
    super::hugetlb::with_unshare_locks(k, v, || {
        let mut off = 0;
        while off < len {
            let (src, dst) = (old + off, new + off);
            if size == PMD_SIZE && super::hugetlb::huge_pmd_unshare(k, mm, &mut tlb, src) {
                off = pud_addr_end(src, old + len) - old;
                continue;
            }
            let slot = if size == PMD_SIZE { walk_pmd(phys, mm.pgd, src) } else { huge_pud(phys, mm.pgd, src) };
            if let Some(s) = slot.filter(|s| !s.load(phys).is_none()) {
                let d = if size == PMD_SIZE {
                    alloc_pmd(k, mm.pgd, dst, &mm.page_table_lock)?
                } else {
                    let (table, idx) = alloc_pud(k, mm.pgd, dst, &mm.page_table_lock)?;
                    PmdSlot { table, idx }
                };
                let _sptl = pte_lockptr(phys, s.table).lock();
                let _dptl = (d.table != s.table).then(|| pte_lockptr(phys, d.table).lock());
                d.store(phys, s.load(phys));
                s.store(phys, Pte::NONE);
            }
            off += size;
        }
        Ok(())
    })?;
    drop(tlb);
    mm.tlb.flush_range(&k.stats, old, old + len);
    Ok(())
}
