//! Fork's page-table copy (mm/memory.c `copy_page_range` →
//! `copy_pte_range` → `copy_present_ptes`, `copy_present_page`), with PTE
//! batches per folio and the pinned-page copies of cow.c's pin cases.

use crate::arch::{pmd_addr_end, pte_index, pud_addr_end, Pfn, Pte, PAGE_SIZE};
use crate::folio::Folio;
use crate::kernel::{Kernel, Stats};
use crate::mapcount::Level;
use crate::mm_types::{Mm, Vma};
use crate::pgtable::{alloc_pmd, alloc_pte_table, folio_pte_batch, load, pte_lockptr, store, walk_pmd};
use crate::rmap;
use crate::sync::atomic::Ordering::Relaxed;
use crate::Result;

/// One VMA's page-table copy at fork: the parent `src` and its VMA, the
/// child `dst` and its copy of the VMA (Linux reaches both MMs through the
/// two VMAs).
pub(crate) struct CopyVma<'a> {
    pub k: &'a Kernel,
    pub dst: &'a Mm,
    pub src: &'a Mm,
    pub src_vma: &'a Vma,
    pub dst_vma: &'a Vma,
}

impl CopyVma<'_> {
    /// `copy_page_range` for a private VMA with an anon_vma (anonymous, or a
    /// file mapping some of whose pages were copied on write). A huge PMD that may be
    /// pinned is split in the parent and copied by PTEs (`copy_huge_pmd`
    /// returning -EAGAIN).
    pub(crate) fn copy_page_range(&self) -> Result<()> {
        let (k, dst, src) = (self.k, self.dst, self.src);
        let phys = &k.phys;
        let (start, end) = (self.src_vma.start(), self.src_vma.end());
        let mut addr = start;
        while addr < end {
            let Some(spmd) = walk_pmd(phys, src.pgd, addr) else {
                addr = pud_addr_end(addr, end);
                continue;
            };
            let next = pmd_addr_end(addr, end);
            crate::sync::sim::work(crate::sync::sim::Work::PtSteps(1));
            let mut e = spmd.load(phys);
            if e.huge() {
                let dpmd = alloc_pmd(k, dst.pgd, addr, &dst.page_table_lock)?;
                if super::huge_memory::copy_huge_pmd(k, dst, src, dpmd, spmd, addr)? {
                    addr = next;
                    continue;
                }
                super::huge_memory::split_huge_pmd(k, src, addr);
                e = spmd.load(phys);
            }
            if !e.is_none() && !e.huge() {
                let dpmd = alloc_pmd(k, dst.pgd, addr, &dst.page_table_lock)?;
                let dtable = alloc_pte_table(k, dpmd)?.expect("child PMD cannot be huge");
                self.copy_pte_range(dtable, e.pfn(), addr, next)?;
            }
            addr = next;
        }
        Ok(())
    }

    /// `copy_pte_range` + `copy_present_ptes`: copies swap entries
    /// ([`Self::copy_nonpresent_pte`]), and present PTEs in batches of
    /// one folio (dirty respected, write merged), one reference add and one rmap
    /// duplication per batch (page by page under the per-page zap strategy,
    /// as before 6.9); write-protects the parent's PTEs and gives the child
    /// old, read-only copies. The zero page is copied as it is. When duplication
    /// refuses a batch (a page that may be pinned), the batch is redone page by
    /// page and each such page is copied for the child (`copy_present_page`).
    fn copy_pte_range(&self, dtable: Pfn, stable: Pfn, start: u64, end: u64) -> Result<()> {
        let (k, dst, src) = (self.k, self.dst, self.src);
        let phys = &k.phys;
        let pinned = src.has_pinned.load(Relaxed);
        let _dptl = pte_lockptr(phys, dtable).lock();
        let _sptl = pte_lockptr(phys, stable).lock();
        let mut addr = start;
        let mut single = 0; // pages left to handle one by one after a refused batch
        while addr < end {
            let idx = pte_index(addr);
            let pte = load(phys, stable, idx);
            if pte.is_none() {
                addr += PAGE_SIZE;
                continue;
            }
            if pte.is_swap() {
                self.copy_nonpresent_pte(dtable, stable, idx, pte);
                addr += PAGE_SIZE;
                continue;
            }
            if pte.special() {
                store(phys, dtable, idx, pte);
                addr += PAGE_SIZE;
                continue;
            }
            let f = Folio::containing(phys, pte.pfn());
            let max_nr = ((end - addr) / PAGE_SIZE) as usize;
            let batching = k.config.zap == crate::kernel::ZapStrategy::Batched;
            let (nr, any_writable) = if batching && single == 0 && f.is_large() && max_nr > 1 {
                folio_pte_batch(phys, f, stable, idx, pte, max_nr, self.batch_respects())
            } else {
                (1, pte.write())
            };
            single = usize::saturating_sub(single, 1);
            f.ref_add(nr as i32);
            if !f.test_anon() {
                // A file page of a private mapping: read-only, shared with the
                // child as it is (folio_dup_file_rmap_ptes).
                rmap::folio_add_file_rmap(k, f, pte.pfn() - f.pfn, nr as u64, Level::Pte, dst.rmap);
                let child = pte.without(Pte::ACCESSED | Pte::UFFD_WP);
                (0..nr).for_each(|i| store(phys, dtable, idx + i, child.next_pfn(i as u64)));
                dst.add_rss(f, nr as i64);
                Stats::add(&k.stats.fork_ptes, nr as u64);
                Stats::inc(&k.stats.fork_batches);
                addr += nr as u64 * PAGE_SIZE;
                continue;
            }
            if rmap::folio_try_dup_anon_rmap(k, f, pte.pfn() - f.pfn, nr as u64, Level::Pte, dst.rmap, pinned).is_err()
            {
                f.put_refs(nr as i32);
                if nr > 1 {
                    single = nr;
                    continue;
                }
                self.copy_present_page(dtable, idx, addr, pte)?;
                addr += PAGE_SIZE;
                continue;
            }
            // The child is registered with no userfaultfd
            // (dup_userfaultfd without UFFD_FEATURE_EVENT_FORK): its entries
            // lose the uffd-wp bit (copy_present_ptes: pte_clear_uffd_wp).
            let child = pte.without(Pte::RW | Pte::ACCESSED | Pte::UFFD_WP);
            for i in 0..nr {
                if any_writable {
                    let s = load(phys, stable, idx + i);
                    store(phys, stable, idx + i, s.without(Pte::RW));
                }
                store(phys, dtable, idx + i, child.next_pfn(i as u64));
            }
            dst.add_anon_rss(nr as i64);
            Stats::add(&k.stats.fork_ptes, nr as u64);
            Stats::inc(&k.stats.fork_batches);
            addr += nr as u64 * PAGE_SIZE;
        }
        Ok(())
    }

    /// The bits a batch of the parent's PTEs must share beside the pages
    /// (`copy_present_ptes`): dirty in a private mapping, soft-dirty where
    /// writes are being tracked.
    fn batch_respects(&self) -> u64 {
        let dirty = if self.src_vma.shared() { 0 } else { Pte::DIRTY };
        dirty | if self.src_vma.soft_dirty_enabled(self.k.config.soft_dirty) { Pte::SOFT_DIRTY } else { 0 }
    }

    /// `copy_nonpresent_pte` for a swap entry: one more entry names the
    /// slot (`swap_duplicate`), and neither the parent's entry nor the
    /// child's copy is exclusive any more (`pte_swp_clear_exclusive`).
    fn copy_nonpresent_pte(&self, dtable: Pfn, stable: Pfn, idx: usize, pte: Pte) {
        let (k, dst) = (self.k, self.dst);
        let dev = k.swap.as_ref().expect("a swap entry implies a swap device");
        dev.duplicate(pte.swp_entry(), 1);
        let shared = pte.without(Pte::SWP_EXCLUSIVE);
        if pte.swp_exclusive() {
            store(&k.phys, stable, idx, shared);
        }
        // The child is registered with no userfaultfd: no uffd-wp bit.
        store(&k.phys, dtable, idx, shared.without(Pte::SWP_UFFD_WP));
        dst.add_swap_rss(1);
    }

    /// `copy_present_page`: the child gets its own copy of a page that may be
    /// pinned, mapped writable if the VMA is; the parent's PTE stays as it was
    /// (writable, exclusive), so the pin keeps seeing the parent's page.
    fn copy_present_page(&self, dtable: Pfn, idx: usize, addr: u64, pte: Pte) -> Result<()> {
        let (k, dst, dst_vma) = (self.k, self.dst, self.dst_vma);
        let new = k.alloc_folio_on(self.src_vma.placement(addr, 0), 0, false)?;
        k.phys.copy_frame(new.pfn, pte.pfn());
        // The same page index as the original: the child's VMA has the
        // parent's vm_pgoff.
        let old = Folio::containing(&k.phys, pte.pfn());
        let index = old.index() + pte.pfn() - old.pfn;
        rmap::folio_add_new_anon_rmap(k, new, Level::Pte, dst.rmap, (dst_vma.anon_vma(), index));
        k.folio_add_lru_vma(new, dst_vma.mlocked());
        // copy_present_page(): maybe_mkwrite(pte_mkdirty()).
        let w = if dst_vma.writable() { Pte::RW } else { 0 };
        store(&k.phys, dtable, idx, Pte::new(new.pfn, Pte::PRESENT | Pte::USER | Pte::ACCESSED | Pte::MKDIRTY | w));
        dst.add_anon_rss(1);
        Stats::inc(&k.stats.fork_copy_pinned);
        Ok(())
    }
}
