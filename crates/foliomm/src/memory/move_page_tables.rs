//! mm/mremap.c `move_page_tables`: mremap moving a range's entries to a new
//! address within one MM.

use crate::arch::{pmd_addr_end, pte_index, Pte, PAGE_SIZE, PMD_SIZE};
use crate::kernel::Kernel;
use crate::mm_types::Mm;
use crate::pgtable::{alloc_pmd, alloc_pte_table, load, pte_lockptr, store, walk_pmd};
use crate::Result;

/// `move_page_tables`: moves the entries of `[old, old+len)` to `new`. A huge
/// PMD moves as one entry (with its deposited table) when both addresses are
/// PMD-aligned and the block is whole; otherwise it is split and its PTEs
/// move one by one (`move_ptes`). rmap is unchanged: the same MM maps the
/// same folios.
pub(crate) fn move_page_tables(k: &Kernel, mm: &Mm, old: u64, new: u64, len: u64) -> Result<()> {
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
            super::huge_memory::move_huge_pmd(k, mm, spmd, dpmd, src, dst);
            off += step;
            continue;
        }
        if e.huge() {
            super::huge_memory::split_huge_pmd(k, mm, src);
        }
        let e = spmd.load(phys);
        if !e.is_none() {
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
                    store(phys, dtable, pte_index(d), p);
                }
            }
        }
        off += step;
    }
    mm.tlb.flush_range(&k.stats, old, old + len);
    Ok(())
}
