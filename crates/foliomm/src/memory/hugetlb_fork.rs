//! A hugetlb VMA's page tables at fork (mm/hugetlb.c
//! `copy_hugetlb_page_range`): the child shares the parent's PMD tables
//! where it can, and otherwise gets the parent's huge entries.

use super::hugetlb::{huge_pte_alloc, huge_pte_offset};
use crate::arch::{pud_addr_end, Pte};
use crate::folio::Folio;
use crate::kernel::{HugeSize, Kernel};
use crate::mapcount::Level;
use crate::mm_types::{Mm, Vma};
use crate::pgtable::{pte_lockptr, PmdSlot};
use crate::rmap;
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::sim;
use crate::Result;

/// `copy_hugetlb_page_range` (fork): the child's entries for the hugetlb
/// VMA `src_vma` (its copy `dst_vma` linked already), a private one with
/// an anon_vma (the only kind `vma_needs_copy` copies). Its file pages not
/// yet copied gain the child's references; its anonymous pages become
/// read-only in both (a pinned one is copied for the child at once).
/// ENOMEM without page tables, or when the pool has no page for such a
/// copy (`alloc_hugetlb_folio` fails: the fork fails, as Linux's does).
///
/// Like Linux's copy of a private ("cow") VMA, it takes neither
/// `i_mmap_rwsem` nor the hugetlb VMA lock: fork holds both MMs' mmap_lock
/// for write, and a private VMA's PMD tables are never shared
/// (`want_pmd_share` needs VM_MAYSHARE). Linux also copies a shared VMA
/// registered for uffd-wp, under those locks and skipping shared tables;
/// the model copies no VMA for uffd-wp, so it has no such path.
pub(crate) fn copy_hugetlb_page_range(k: &Kernel, dst: &Mm, src: &Mm, dst_vma: &Vma, src_vma: &Vma) -> Result<()> {
    let inode = src_vma.file().expect("a hugetlb VMA maps a hugetlbfs file");
    let size = inode.huge_size().expect("a hugetlbfs file");
    debug_assert!(!src_vma.shared(), "fork copies only private hugetlb VMAs");
    let mut addr = src_vma.start();
    while addr < src_vma.end() {
        sim::work(sim::Work::PtSteps(1));
        let Some(spmd) = huge_pte_offset(k, src, addr, size) else {
            addr = pud_addr_end(addr, src_vma.end());
            continue;
        };
        let (dpmd, _) = huge_pte_alloc(k, dst, dst_vma, &inode, addr, None)?;
        copy_huge_entry(k, (dst, dst_vma), src, (dpmd, spmd), addr, size)?;
        addr += size.bytes();
    }
    Ok(())
}

/// Copies the parent's huge entry for a page of `size` at `addr` (slots
/// `(child's, parent's)`), read under both page-table locks (a truncation
/// may have zapped it meanwhile), into the child `dst` (with the anon_vma
/// of its VMA). ENOMEM when a pinned page's copy finds no pool page.
fn copy_huge_entry(
    k: &Kernel,
    (dst, dst_vma): (&Mm, &Vma),
    src: &Mm,
    (dpmd, spmd): (PmdSlot, PmdSlot),
    addr: u64,
    size: HugeSize,
) -> Result<()> {
    let phys = &k.phys;
    let nr = size.pages();
    let _dl = pte_lockptr(phys, dpmd.table).lock();
    let _sl = (dpmd.table != spmd.table).then(|| pte_lockptr(phys, spmd.table).lock());
    let e = spmd.load(phys);
    if !e.huge() {
        return Ok(());
    }
    let f = Folio::from_head(phys, e.pfn());
    if !f.test_anon() {
        f.ref_add(1);
        rmap::folio_add_file_rmap(k, f, 0, nr, Level::Pmd, dst.rmap);
        // The child is registered with no userfaultfd: no uffd-wp bit.
        dpmd.store(phys, e.without(Pte::UFFD_WP));
        dst.add_rss(f, nr as i64);
        return Ok(());
    }
    let pinned = src.has_pinned.load(Relaxed);
    f.ref_add(1);
    if rmap::folio_try_dup_anon_rmap(k, f, 0, nr, Level::Pmd, dst.rmap, pinned).is_ok() {
        spmd.store(phys, e.without(Pte::RW));
        dpmd.store(phys, e.without(Pte::RW | Pte::UFFD_WP));
        dst.add_rss(f, nr as i64);
        src.tlb.flush_range(&k.stats, addr, addr + size.bytes());
        return Ok(());
    }
    f.put_refs(1);
    // A maybe-pinned exclusive page: the child gets its own copy now.
    let new = k.alloc_hugetlb_folio(size, false, dst_vma.huge_placement(f.index(), size.order()))?;
    (0..nr).for_each(|i| phys.copy_frame(new.pfn + i, f.pfn + i));
    rmap::folio_add_new_anon_rmap(k, new, Level::Pmd, dst.rmap, (dst_vma.anon_vma(), f.index()));
    dpmd.store(phys, Pte::new(new.pfn, e.0 & !Pte::PFN_MASK));
    dst.add_rss(new, nr as i64);
    Ok(())
}
