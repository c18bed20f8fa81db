//! Zap (mm/memory.c `unmap_page_range` → `zap_pte_range` →
//! `zap_present_ptes`) and `free_pgtables`: unmapping a range's pages into
//! an mmu_gather, batched per folio (seed 001), and freeing the page tables
//! no VMA needs any more.

use crate::arch::{
    pgd_index, pmd_addr_end, pmd_index, pte_index, pud_addr_end, pud_index, Pfn, Pte, PAGE_SIZE, PGDIR_SIZE, PMD_SIZE,
    PTRS_PER_TABLE, PUD_SIZE,
};
use crate::folio::Folio;
use crate::kernel::{Kernel, Stats, ZapStrategy};
use crate::mapcount::Level;
use crate::mm_types::{Mm, Vma, Vmas};
use crate::pgtable::{folio_pte_batch, huge_pud, load, pte_lock_checked, pte_lockptr, store, take, walk_pmd, PmdSlot};
use crate::rmap;
use crate::tlb::MmuGather;

use super::swap::{free_swap_and_cache_nr, swap_pte_batch};

/// `struct zap_details`: what a zap leaves, and what it may free.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ZapDetails {
    /// `skip_cows`: anon pages stay (a hole punch); only file pages are
    /// unmapped.
    pub skip_cows: bool,
    /// `reclaim_pt`: a PTE table the zap covers whole and leaves empty is
    /// freed (`MADV_DONTNEED` with PT_RECLAIM,
    /// [`crate::release::KernelVersion::reclaims_empty_pte_tables`]).
    pub reclaim_pt: bool,
    /// The zapped VMA is `VM_LOCKED`: each folio unmapped joins the
    /// `mlock` batch (`munlock_vma_folio`).
    pub mlocked: bool,
}

/// `unmap_single_vma`: [`unmap_page_range`] over `[start, end)` of the VMA
/// `v`; for a hugetlb VMA with the locks unsharing a PMD table needs
/// ([`super::hugetlb::with_unshare_locks`]), after the owner of a private
/// one marked its pages' reservations for restoring.
pub(crate) fn unmap_vma_range(
    k: &Kernel,
    mm: &Mm,
    tlb: &mut MmuGather,
    v: &Vma,
    (start, end): (u64, u64),
    details: ZapDetails,
) {
    super::hugetlb_resv::restore_reservations(k, mm, v, start, end);
    let details = ZapDetails { mlocked: v.mlocked(), ..details };
    super::hugetlb::with_unshare_locks(k, v, || unmap_page_range(k, mm, tlb, start, end, details));
}

/// `unmap_page_range` over `[start, end)` of `mm`: huge PMDs covered whole are
/// zapped as one, partially covered ones are split first; `details` says
/// what stays and whether emptied PTE tables go.
pub(crate) fn unmap_page_range(k: &Kernel, mm: &Mm, tlb: &mut MmuGather, start: u64, end: u64, details: ZapDetails) {
    let _walk = mm.pt_read();
    let mut addr = start;
    while addr < end {
        // A step per PMD entry of a table, and per PUD entry the walk
        // skips whole (none, a 1 GiB page, or a shared table let go of):
        // a long VMA with few tables still costs a step per 1 GiB.
        crate::sync::sim::work(crate::sync::sim::Work::PtSteps(1));
        // A shared hugetlb PMD table is only let go of (the caller holds
        // the file's i_mmap_rwsem for write). Sharing is per PUD window:
        // one look as the walk enters each, not one per PMD step.
        let enters_window = addr == start || addr.is_multiple_of(PUD_SIZE);
        if enters_window && super::hugetlb::huge_pmd_unshare(k, mm, tlb, addr) {
            addr = pud_addr_end(addr, end);
            continue;
        }
        let Some(pmd) = walk_pmd(&k.phys, mm.pgd, addr) else {
            // No PMD table: nothing, or a 1 GiB hugetlb page (its VMA's
            // ranges are whole pages).
            if let Some(pud) = huge_pud(&k.phys, mm.pgd, addr) {
                super::huge_memory::zap_huge_pmd(k, mm, tlb, pud, addr & !(PUD_SIZE - 1), details.mlocked);
            }
            addr = pud_addr_end(addr, end);
            continue;
        };
        let next = pmd_addr_end(addr, end);
        let mut e = pmd.load(&k.phys);
        if e.huge() {
            let whole = addr.is_multiple_of(PMD_SIZE) && next - addr == PMD_SIZE;
            if whole && super::huge_memory::zap_huge_pmd(k, mm, tlb, pmd, addr, details.mlocked) {
                addr = next;
                continue;
            }
            // Split first, or split meanwhile: its PTEs are zapped instead.
            if !whole {
                super::huge_memory::split_huge_pmd(k, mm, addr);
            }
            e = pmd.load(&k.phys);
        }
        if !e.is_none() && !e.huge() {
            zap_pte_range(k, mm, tlb, (pmd, e.pfn()), (addr, next), details);
        }
        addr = next;
    }
}

/// `zap_pte_range` + `zap_present_ptes`: clears present PTEs in batches of
/// consecutive pages of one folio, with one rmap removal, one rss update, one
/// TLB-range extension and one gather entry per batch. A full gather is
/// flushed (TLB, then frees) after dropping the PTL and the walk resumes.
/// The rmap of a file folio mapped by a dirty PTE is removed after the
/// TLB flush, still under the PTL (`tlb_flush_rmaps`). A table found
/// reclaimed under its lock (a concurrent `MADV_DONTNEED`) has nothing
/// left to zap. With `reclaim_pt`, a table covered whole is then freed if
/// empty ([`try_to_free_pte`]).
fn zap_pte_range(
    k: &Kernel,
    mm: &Mm,
    tlb: &mut MmuGather,
    (pmd, table): (PmdSlot, Pfn),
    (start, end): (u64, u64),
    details: ZapDetails,
) {
    let (phys, skip_cows) = (&k.phys, details.skip_cows);
    let mut addr = start;
    while addr < end {
        let (mut full, mut force_flush) = (false, false);
        {
            let Some(_ptl) = pte_lock_checked(phys, pmd, table) else { return };
            while addr < end && !full {
                let idx = pte_index(addr);
                let now = load(phys, table, idx);
                let cow = || now.is_swap() || !now.special() && Folio::containing(phys, now.pfn()).test_anon();
                if now.is_none() || (skip_cows && cow()) {
                    addr += PAGE_SIZE;
                    continue;
                }
                if now.is_swap() {
                    addr += zap_swap_ptes(k, mm, table, idx, now, ((end - addr) / PAGE_SIZE) as usize) * PAGE_SIZE;
                    continue;
                }
                // get_and_clear_full_ptes(): atomic exchanges, so that an
                // accessed/dirty bit a CPU sets meanwhile is not lost.
                let pte = take(phys, table, idx);
                if pte.special() {
                    tlb.remove_tlb_entries(addr, 1);
                    addr += PAGE_SIZE;
                    continue;
                }
                let f = Folio::containing(phys, pte.pfn());
                let max_nr = ((end - addr) / PAGE_SIZE) as usize;
                let batched = k.config.zap == ZapStrategy::Batched;
                let nr = if batched && f.is_large() && max_nr > 1 {
                    folio_pte_batch(phys, f, table, idx, pte, max_nr, 0).0
                } else {
                    1
                };
                let mut dirty = pte.dirty();
                for i in 1..nr {
                    dirty |= take(phys, table, idx + i).dirty();
                }
                Stats::add(&k.stats.zap_ptes, nr as u64);
                Stats::inc(&k.stats.zap_batches);
                mm.add_rss(f, -(nr as i64));
                tlb.remove_tlb_entries(addr, nr as u64);
                // zap_present_folio_ptes(): a dirty PTE dirties a file folio,
                // and its rmap goes only after the TLB flush (seed 001's
                // delayed rmap), so that no CPU writes through a stale entry
                // once the rmap no longer shows the mapping.
                let delay = dirty && !f.test_anon();
                if delay {
                    f.head().set(crate::phys::pg::DIRTY);
                    Stats::inc(&k.stats.rmap_delayed);
                    force_flush = true;
                } else {
                    rmap::folio_remove_rmap(k, f, pte.pfn() - f.pfn, nr as u64, Level::Pte, mm.rmap);
                }
                // Linux's rmap removal munlocks (for a delayed one, after
                // the flush; here at once, which only orders the batch).
                k.munlock_vma_folio(f, details.mlocked, false);
                full = tlb.remove_folio_pages(pte.pfn(), nr as u32, delay);
                addr += nr as u64 * PAGE_SIZE;
            }
            // The TLB flush, then the delayed rmaps, before the PTL goes.
            if force_flush {
                tlb.flush_tlb();
                tlb.flush_rmaps(mm.rmap);
            }
        }
        if full || force_flush {
            tlb.flush_mmu();
        }
    }
    if details.reclaim_pt && end - start >= PMD_SIZE {
        try_to_free_pte(k, tlb, pmd, table, start);
    }
}

/// `zap_nonpresent_ptes` for swap entries: clears the batch of entries
/// that continue `pte` (at most `max`), frees their slots
/// (`free_swap_and_cache_nr`) and counts them out of `MM_SWAPENTS`;
/// returns how many. Before 6.9 Linux went entry by entry (the per-page
/// zap strategy), to the same result.
fn zap_swap_ptes(k: &Kernel, mm: &Mm, table: Pfn, idx: usize, pte: Pte, max: usize) -> u64 {
    let batched = k.config.zap == ZapStrategy::Batched;
    let nr = if batched { swap_pte_batch(&k.phys, table, idx, pte, max) } else { 1 };
    Stats::add(&k.stats.zap_swap_entries, nr as u64);
    Stats::inc(&k.stats.zap_swap_batches);
    for i in 0..nr {
        store(&k.phys, table, idx + i, Pte(0));
    }
    mm.add_swap_rss(-(nr as i64));
    free_swap_and_cache_nr(k, pte.swp_entry(), nr as u64);
    nr as u64
}

/// `try_to_free_pte` (mm/pt_reclaim.c): under the PMD lock and the PTL,
/// unlinks the PTE table `table` from `pmd` if every entry is none, and
/// hands it to the gather, which frees it after the TLB flush and once no
/// walker can still hold it ([`crate::tlb::TableRcu`]). Linux first tries
/// the same under the PTL the zap held (`try_get_and_clear_pmd`); the
/// outcome is the same.
pub(super) fn try_to_free_pte(k: &Kernel, tlb: &mut MmuGather, pmd: PmdSlot, table: Pfn, addr: u64) {
    let phys = &k.phys;
    let _pml = pte_lockptr(phys, pmd.table).lock();
    let Some(_ptl) = pte_lock_checked(phys, pmd, table) else { return };
    if (0..PTRS_PER_TABLE as usize).all(|i| load(phys, table, i).is_none()) {
        pmd.store(phys, Pte::NONE);
        tlb.remove_table(table, addr);
    }
}

/// `free_pgtables` / `free_pgd_range`: after `[start, end)` was unmapped,
/// frees every page table below the PGD whose span no VMA intersects any more.
pub(crate) fn free_pgtables(k: &Kernel, mm: &Mm, vmas: &Vmas, tlb: &mut MmuGather, start: u64, end: u64) {
    let phys = &k.phys;
    let unused = |lo: u64, size: u64| !vmas.any_in(lo, lo.saturating_add(size));
    let mut a = start & !(PGDIR_SIZE - 1);
    while a < end {
        let pgde = load(phys, mm.pgd, pgd_index(a));
        if !pgde.is_none() {
            let pud_table = pgde.pfn();
            let mut b = a.max(start & !(PUD_SIZE - 1));
            let b_end = (a + PGDIR_SIZE).min(end);
            while b < b_end {
                let pude = load(phys, pud_table, pud_index(b));
                if !pude.is_none() {
                    let pmd_table = pude.pfn();
                    let mut c = b.max(start & !(PMD_SIZE - 1));
                    let c_end = (b + PUD_SIZE).min(end);
                    while c < c_end {
                        let pmde = load(phys, pmd_table, pmd_index(c));
                        if !pmde.is_none() && !pmde.huge() && unused(c, PMD_SIZE) {
                            store(phys, pmd_table, pmd_index(c), Pte::NONE);
                            tlb.remove_table(pmde.pfn(), c);
                        }
                        c += PMD_SIZE;
                    }
                    if unused(b, PUD_SIZE) {
                        store(phys, pud_table, pud_index(b), Pte::NONE);
                        tlb.remove_table(pmd_table, b);
                    }
                }
                b += PUD_SIZE;
            }
            if unused(a, PGDIR_SIZE) {
                store(phys, mm.pgd, pgd_index(a), Pte::NONE);
                tlb.remove_table(pud_table, a);
            }
        }
        a = match a.checked_add(PGDIR_SIZE) {
            Some(n) => n,
            None => break,
        };
    }
}
