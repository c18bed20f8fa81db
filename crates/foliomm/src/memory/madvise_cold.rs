//! `MADV_PAGEOUT` and `MADV_COLD` (mm/madvise.c
//! `madvise_cold_or_pageout_pte_range`, then `reclaim_pages` for pageout):
//! the walk over one VMA's range that picks the anon and shmem folios
//! mapped only here and takes them off the LRU for [`super::vmscan`] to
//! reclaim (pageout), or sends the active ones to the inactive list
//! through this CPU's batch (cold).
//!
//! Differs from Linux: 6.1 splits even a covered PTE-mapped THP (its pages
//! end up swapped out alike); the caller may always page out a file's
//! folios (`can_do_file_pageout`: the model has no owners or
//! permissions).

use super::split::split_folio_to_order;
use super::vmscan::{shrink_folio, Reclaim};
use crate::arch::{pte_index, Pfn, Pte, PAGE_SIZE, PMD_SIZE};
use crate::folio::Folio;
use crate::kernel::{Consumer, Kernel, Stats};
use crate::mm_types::Mm;
use crate::pgtable::{folio_pte_batch, load, pte_lock_checked, pte_lockptr, store, walk_pmd, PmdSlot};
use crate::phys::pg;
use crate::rmap;

/// `madvise_cold_or_pageout_pte_range` + `reclaim_pages` over `[start,
/// end)` of one VMA of `mm` (the mmap_lock held for read): the anon folios
/// there mapped only here (`folio_mapcount(folio) != folio_nr_pages(folio)`
/// passes over a shared one; in 6.1 `page_mapcount != 1`, the same for the
/// folios reclaimed here) are isolated under the PTL, then reclaimed one by
/// one ([`shrink_folio`], ignoring references) without it. A PMD-mapped
/// THP goes whole when the range covers it and it is not maybe mapped
/// shared. For `MADV_COLD` (`pageout` false) the same walk splits what it
/// covers in part, makes the entries old and sends the active folios to
/// the inactive list through this CPU's batch, unreferenced
/// (`folio_deactivate`).
pub fn pageout_range(k: &Kernel, mm: &Mm, start: u64, end: u64, pageout: bool) {
    // madvise_pageout() / madvise_cold(): lru_add_drain() first.
    k.lru_add_drain();
    for_each_pmd(k, mm, (start, end), |pmd, (addr, stop)| {
        if pmd.load(&k.phys).huge() && (!addr.is_multiple_of(PMD_SIZE) || stop - addr < PMD_SIZE) {
            split_partly_covered_thp(k, mm, pmd);
        }
        let e = pmd.load(&k.phys);
        let isolated = if e.huge() {
            isolate_pmd(k, mm, pmd, (addr, stop), pageout).into_iter().collect()
        } else if !e.is_none() {
            isolate(k, mm, pmd, e.pfn(), (addr, stop), pageout)
        } else {
            Vec::new()
        };
        for f in isolated {
            shrink_folio(k, &mm.mmlist, f, Reclaim::PAGES);
        }
    });
}

/// The PMD level of the page walk the madvise ranges share
/// (`walk_page_range`): `visit` for each PMD slot of `mm` in `[start, end)`
/// that has a table above it, with the part of the range it covers, under
/// the MM's table read section.
pub(super) fn for_each_pmd(k: &Kernel, mm: &Mm, (start, end): (u64, u64), mut visit: impl FnMut(PmdSlot, (u64, u64))) {
    let _walk = mm.pt_read();
    let mut addr = start;
    while addr < end {
        let stop = ((addr | (PMD_SIZE - 1)) + 1).min(end);
        if let Some(pmd) = walk_pmd(&k.phys, mm.pgd, addr) {
            visit(pmd, (addr, stop));
        }
        addr = stop;
    }
}

/// A PMD-mapped THP the range covers in part is split, mapping and
/// folio, unless it may be mapped shared (the era's question), so that its
/// covered pages can go one by one (`madvise_cold_or_pageout_pte_range`'s
/// PMD branch: `split_folio`).
fn split_partly_covered_thp(k: &Kernel, mm: &Mm, pmd: PmdSlot) {
    let e = pmd.load(&k.phys);
    let f = Folio::from_head(&k.phys, e.pfn());
    if e.special() || !reclaimable(f) || k.decided(Consumer::PageoutSplit, f, rmap::folio_likely_mapped_shared(k, f, 0))
    {
        return;
    }
    if f.try_get() {
        split_and_put(k, mm, f);
    }
}

/// `folio_get` (done) + `split_folio` + `folio_put`, without the PTL; true
/// if the folio was split.
pub(super) fn split_and_put(k: &Kernel, mm: &Mm, f: Folio) -> bool {
    let split = split_folio_to_order(k, &mm.mmlist, f, 0, 1, None).is_ok();
    // The reference is on the first page now, if it was split.
    k.folio_put_refs(Folio::containing(&k.phys, f.pfn), 1);
    split
}

/// The anon or shmem THP a huge PMD maps, if `[addr, stop)` covers it and it is not
/// maybe mapped shared: for `MADV_PAGEOUT` taken off the LRU with a
/// reference, for `MADV_COLD` its PMD made old (`pmd_mkold`) and the folio
/// deactivated ([`isolate_or_deactivate`]).
fn isolate_pmd<'k>(k: &'k Kernel, mm: &Mm, pmd: PmdSlot, (addr, stop): (u64, u64), pageout: bool) -> Option<Folio<'k>> {
    let _pl = pte_lockptr(&k.phys, pmd.table).lock();
    let e = pmd.load(&k.phys);
    if !e.huge() || e.special() || !addr.is_multiple_of(PMD_SIZE) || stop - addr < PMD_SIZE {
        return None;
    }
    let f = Folio::from_head(&k.phys, e.pfn());
    if !reclaimable(f) || k.decided(Consumer::Pageout, f, rmap::folio_maybe_mapped_shared(k, f)) {
        return None;
    }
    if !pageout && e.0 & Pte::ACCESSED != 0 {
        pmd.store(&k.phys, e.without(Pte::ACCESSED));
        mm.tlb.flush_range(&k.stats, addr, addr + PMD_SIZE);
    }
    isolate_or_deactivate(k, f, pageout)
}

/// `f` unreferenced (`folio_clear_referenced`), then for `MADV_PAGEOUT`
/// taken off the LRU with a reference (`folio_isolate_lru`), if it is on
/// it; for `MADV_COLD`, if active, on its way to the inactive list
/// ([`Kernel::folio_deactivate`]), and nothing to return.
fn isolate_or_deactivate<'k>(k: &'k Kernel, f: Folio<'k>, pageout: bool) -> Option<Folio<'k>> {
    f.head().clear(pg::REFERENCED);
    if pageout {
        return k.lru.isolate(f).then_some(f);
    }
    k.folio_deactivate(f);
    None
}

/// The anon and shmem folios on the LRU mapped in `[addr, stop)` of
/// `table` whose every page is mapped there once and nowhere else: for
/// `MADV_PAGEOUT` each taken off the LRU with a reference
/// (`folio_isolate_lru`); for `MADV_COLD` their PTEs made old
/// (`clear_young_dirty_ptes` with `CYDP_CLEAR_YOUNG`) and the folios
/// deactivated ([`isolate_or_deactivate`]).
fn isolate<'k>(
    k: &'k Kernel,
    mm: &Mm,
    pmd: PmdSlot,
    table: Pfn,
    (addr, stop): (u64, u64),
    pageout: bool,
) -> Vec<Folio<'k>> {
    let mut out = Vec::new();
    let mut a = addr;
    'locked: while let Some(ptl) = pte_lock_checked(&k.phys, pmd, table) {
        while a < stop {
            let (idx, pte) = (pte_index(a), load(&k.phys, table, pte_index(a)));
            if !pte.present() || pte.special() {
                a += PAGE_SIZE;
                continue;
            }
            let f = Folio::containing(&k.phys, pte.pfn());
            let max = ((stop - a) / PAGE_SIZE) as usize;
            let nr = if f.is_large() { folio_pte_batch(&k.phys, f, table, idx, pte, max, 0).0 } else { 1 };
            if !reclaimable(f) {
                a += nr as u64 * PAGE_SIZE;
                continue;
            }
            // Part of a large folio: split it (if no other MM may map it)
            // with the PTL dropped, and look at the same entry again, now a
            // page of its own.
            if nr as u64 != f.nr_pages() || pte.pfn() != f.pfn {
                // The era's question: folio_maybe_mapped_shared (6.15+),
                // folio_likely_mapped_shared before, page_mapcount in 6.1.
                let shared = rmap::folio_likely_mapped_shared(k, f, pte.pfn() - f.pfn);
                if k.decided(Consumer::PageoutSplit, f, shared) || !f.try_get() {
                    a += nr as u64 * PAGE_SIZE;
                    continue;
                }
                drop(ptl);
                if !split_and_put(k, mm, f) {
                    a += nr as u64 * PAGE_SIZE;
                }
                continue 'locked;
            }
            a += nr as u64 * PAGE_SIZE;
            if !f.head().test(pg::LRU) {
                continue;
            }
            let shared = rmap::folio_mapcount(k, f) != f.nr_pages();
            let shared = if f.is_large() { k.decided(Consumer::Pageout, f, shared) } else { shared };
            if shared {
                Stats::inc(&k.stats.pageout_skipped_shared);
                continue;
            }
            if !pageout && pte.0 & Pte::ACCESSED != 0 {
                for j in idx..idx + nr {
                    store(&k.phys, table, j, load(&k.phys, table, j).without(Pte::ACCESSED));
                }
                mm.tlb.flush_range(&k.stats, a - nr as u64 * PAGE_SIZE, a);
            }
            if let Some(f) = isolate_or_deactivate(k, f, pageout) {
                out.push(f);
            }
        }
        break;
    }
    out
}

/// Whether `f` is a folio reclaim takes: anon, or shmem still in its page
/// cache (a swap-backed folio on the anon lists), not hugetlb.
fn reclaimable(f: Folio) -> bool {
    (f.test_anon() || crate::shmem::in_page_cache(f)) && !f.head().test(pg::HUGETLB)
}
