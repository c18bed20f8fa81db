//! Reclaim of anonymous folios to swap as `MADV_PAGEOUT` drives it
//! (mm/madvise.c `madvise_cold_or_pageout_pte_range`, mm/vmscan.c
//! `reclaim_pages` → `shrink_folio_list`, mm/rmap.c `try_to_unmap_one`).
//!
//! Differs from Linux: only small anonymous folios are paged out (Linux
//! also reclaims a large folio the range covers whole, splits one it
//! covers in part, splits or reclaims a PMD-mapped THP, and pages out
//! shmem); there are no LRU lists (a folio still in another CPU's per-CPU
//! batch, which Linux skips, is reclaimed); the rmap walk of
//! `try_to_unmap` visits the one mapping the range walk found, which is
//! every mapping of a small folio whose mapcount is 1.

use crate::arch::{pte_index, Pfn, Pte, SwpEntry, PAGE_SIZE, PMD_SIZE};
use crate::folio::Folio;
use crate::kernel::{Kernel, Stats};
use crate::mapcount::Level;
use crate::mm_types::Mm;
use crate::pgtable::{load, pte_lock_checked, store, walk_pmd, PmdSlot};
use crate::rmap;

/// `madvise_cold_or_pageout_pte_range` + `reclaim_pages` over `[start,
/// end)` of one VMA of `mm` (the mmap_lock held for read): the small anon
/// folios there that are mapped once (`folio_mapcount(folio) !=
/// folio_nr_pages(folio)` passes over a shared one, in 6.1 `page_mapcount
/// != 1`: the same for a small folio) are isolated under the PTL, then
/// reclaimed one by one ([`shrink_folio`]) without it.
pub fn pageout_range(k: &Kernel, mm: &Mm, start: u64, end: u64) {
    let _walk = mm.pt_read();
    let mut addr = start;
    while addr < end {
        let stop = ((addr | (PMD_SIZE - 1)) + 1).min(end);
        let Some(pmd) = walk_pmd(&k.phys, mm.pgd, addr) else {
            addr = stop;
            continue;
        };
        let e = pmd.load(&k.phys);
        if e.is_none() || e.huge() {
            addr = stop;
            continue;
        }
        let isolated = isolate(k, pmd, e.pfn(), addr, stop);
        for (a, f) in isolated {
            shrink_folio(k, mm, (pmd, e.pfn()), a, f);
        }
        addr = stop;
    }
}

/// The small anon folios mapped once in `[addr, stop)` of `table`, each
/// with a reference taken (`folio_isolate_lru`).
fn isolate<'k>(k: &'k Kernel, pmd: PmdSlot, table: Pfn, addr: u64, stop: u64) -> Vec<(u64, Folio<'k>)> {
    let mut out = Vec::new();
    let Some(_ptl) = pte_lock_checked(&k.phys, pmd, table) else { return out };
    for a in (addr..stop).step_by(PAGE_SIZE as usize) {
        let pte = load(&k.phys, table, pte_index(a));
        if !pte.present() || pte.special() {
            continue;
        }
        let f = Folio::containing(&k.phys, pte.pfn());
        if f.is_large() || !f.test_anon() {
            continue;
        }
        if rmap::folio_mapcount(k, f) != 1 {
            Stats::inc(&k.stats.pageout_skipped_shared);
            continue;
        }
        f.ref_add(1);
        out.push((a, f));
    }
    out
}

/// `shrink_folio_list` for one isolated small anon folio mapped at `addr`:
/// a folio that may be pinned stays; else it gets a swap slot and enters
/// the swap cache (`folio_alloc_swap`; it stays where no slot is free), is
/// unmapped ([`try_to_unmap_one`]), written out (`swap_writeout` on a
/// synchronous device: done at once) and, if nothing else holds it, leaves
/// the swap cache and is freed (`__remove_mapping`). Drops the isolation
/// reference.
fn shrink_folio(k: &Kernel, mm: &Mm, (pmd, table): (PmdSlot, Pfn), addr: u64, f: Folio) {
    if let Some(_lock) = f.trylock() {
        if !f.maybe_dma_pinned() {
            if let Ok(e) = k.add_to_swap(f) {
                if try_to_unmap_one(k, mm, (pmd, table), addr, f, e) {
                    k.swap.as_ref().expect("a slot implies a device").write(&k.phys, e, f.pfn);
                    Stats::inc(&k.stats.pswpout);
                    if f.refcount() == 1 + f.nr_pages() as i32 {
                        k.delete_from_swap_cache(f);
                    }
                } else {
                    // Linux keeps it in the swap cache, mapped; foliomm
                    // lets go of the slot at once.
                    k.delete_from_swap_cache(f);
                }
            }
        }
    }
    k.folio_put_refs(f, 1);
}

/// `try_to_unmap_one` for the PTE at `addr` mapping the small anon folio
/// `f`, whose slot is `e`: the entry is cleared and flushed, and replaced
/// by a swap entry naming the slot (`swap_duplicate`), exclusive if the
/// page was AnonExclusive (`folio_try_share_anon_rmap_pte` clears that,
/// and fails for a page that may be pinned: the entry is put back); the
/// mapping's rmap and reference go. False if the entry no longer maps the
/// page, or it could not be shared.
fn try_to_unmap_one(k: &Kernel, mm: &Mm, (pmd, table): (PmdSlot, Pfn), addr: u64, f: Folio, e: SwpEntry) -> bool {
    let (phys, idx) = (&k.phys, pte_index(addr));
    let Some(_ptl) = pte_lock_checked(phys, pmd, table) else { return false };
    let pte = load(phys, table, idx);
    if !pte.present() || pte.special() || pte.pfn() != f.pfn {
        return false;
    }
    store(phys, table, idx, Pte::NONE);
    mm.tlb.flush_range(&k.stats, addr, addr + PAGE_SIZE);
    let exclusive = f.anon_exclusive(0);
    if exclusive && f.maybe_dma_pinned() {
        store(phys, table, idx, pte);
        return false;
    }
    let dev = k.swap.as_ref().expect("a slot implies a device");
    dev.duplicate(e, 1);
    f.set_anon_exclusive(0, false);
    store(phys, table, idx, Pte::swap(e, exclusive));
    mm.add_anon_rss(-1);
    mm.add_swap_rss(1);
    rmap::folio_remove_rmap(k, f, 0, 1, Level::Pte, mm.rmap);
    f.put_refs(1);
    true
}
