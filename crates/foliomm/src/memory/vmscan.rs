//! Reclaim of anonymous folios to swap as `MADV_PAGEOUT` drives it
//! (mm/madvise.c `madvise_cold_or_pageout_pte_range`, mm/vmscan.c
//! `reclaim_pages` → `shrink_folio_list`, mm/rmap.c `try_to_unmap_one`).
//!
//! Differs from Linux: a large folio the range covers only in part is
//! split only where all its mappings are in the table at hand
//! ([`super::split`]), and one that gets no run of free slots stays (Linux
//! splits it); a PMD-mapped THP the range covers in part is left whole;
//! 6.1 splits even a covered PTE-mapped THP (its pages end up swapped out
//! alike); shmem is not paged out; there
//! are no LRU lists (a folio still in another CPU's per-CPU batch, which
//! Linux skips, is reclaimed); the rmap walk of `try_to_unmap` visits the
//! mapping the range walk found, which is every mapping of a folio whose
//! mapcount is its number of pages when that walk found them all.

use super::huge_memory::split_huge_pmd;
use super::split::split_folio_in_table;
use crate::arch::{pte_index, Pfn, Pte, SwpEntry, PAGE_SIZE, PMD_ORDER, PMD_SIZE};
use crate::folio::Folio;
use crate::kernel::{Kernel, Stats};
use crate::mapcount::Level;
use crate::mm_types::Mm;
use crate::pgtable::{folio_pte_batch, load, pte_lock_checked, pte_lockptr, store, walk_pmd, PmdSlot};
use crate::phys::pg;
use crate::rmap;

/// A folio isolated for reclaim: where its first page is mapped, and
/// whether by a huge PMD.
struct Isolated<'k> {
    addr: u64,
    f: Folio<'k>,
    pmd_mapped: bool,
}

/// `madvise_cold_or_pageout_pte_range` + `reclaim_pages` over `[start,
/// end)` of one VMA of `mm` (the mmap_lock held for read): the anon folios
/// there mapped only here (`folio_mapcount(folio) != folio_nr_pages(folio)`
/// passes over a shared one; in 6.1 `page_mapcount != 1`, the same for the
/// folios reclaimed here) are isolated under the PTL, then reclaimed one by
/// one ([`shrink_folio`]) without it. A PMD-mapped THP goes whole when the
/// range covers it and it is not maybe mapped shared. For `MADV_COLD`
/// (`pageout` false) the same walk splits what it covers in part and only
/// deactivates the rest, which the model, without LRU lists, does not see.
pub fn pageout_range(k: &Kernel, mm: &Mm, start: u64, end: u64, pageout: bool) {
    let _walk = mm.pt_read();
    let mut addr = start;
    while addr < end {
        let stop = ((addr | (PMD_SIZE - 1)) + 1).min(end);
        let Some(pmd) = walk_pmd(&k.phys, mm.pgd, addr) else {
            addr = stop;
            continue;
        };
        if pmd.load(&k.phys).huge() && (!addr.is_multiple_of(PMD_SIZE) || stop - addr < PMD_SIZE) {
            split_partly_covered_thp(k, mm, pmd, addr);
        }
        let e = pmd.load(&k.phys);
        let isolated = if e.huge() {
            isolate_pmd(k, pmd, addr, stop).into_iter().collect()
        } else if !e.is_none() {
            isolate(k, mm, pmd, e.pfn(), addr, stop)
        } else {
            Vec::new()
        };
        for i in isolated {
            match pageout {
                true => shrink_folio(k, mm, pmd, i),
                false => k.folio_put_refs(i.f, 1),
            }
        }
        addr = stop;
    }
}

/// A PMD-mapped anon THP the range covers in part is split, mapping and
/// folio, unless it may be mapped shared (the era's question), so that its
/// covered pages can go one by one (`madvise_cold_or_pageout_pte_range`'s
/// PMD branch: `split_folio`).
fn split_partly_covered_thp(k: &Kernel, mm: &Mm, pmd: PmdSlot, addr: u64) {
    let e = pmd.load(&k.phys);
    let f = Folio::from_head(&k.phys, e.pfn());
    if e.special() || !f.test_anon() || rmap::folio_likely_mapped_shared(k, f, 0) {
        return;
    }
    // can_split_folio() comes before any unmapping: a folio something else
    // holds (a pin) keeps its PMD.
    if f.refcount() as u64 != rmap::folio_mapcount(k, f) || k.folio_swap(f).is_some() {
        return;
    }
    split_huge_pmd(k, mm, addr);
    let table = pmd.load(&k.phys);
    if table.is_none() || table.huge() {
        return;
    }
    if let Some(_ptl) = pte_lock_checked(&k.phys, pmd, table.pfn()) {
        split_folio_in_table(k, mm, (table.pfn(), addr & !(PMD_SIZE - 1)), f, 0);
    }
}

/// The anon THP a huge PMD maps, if `[addr, stop)` covers it and it is not
/// maybe mapped shared, with a reference taken.
fn isolate_pmd(k: &Kernel, pmd: PmdSlot, addr: u64, stop: u64) -> Option<Isolated<'_>> {
    let _pl = pte_lockptr(&k.phys, pmd.table).lock();
    let e = pmd.load(&k.phys);
    if !e.huge() || e.special() || !addr.is_multiple_of(PMD_SIZE) || stop - addr < PMD_SIZE {
        return None;
    }
    let f = Folio::from_head(&k.phys, e.pfn());
    if !f.test_anon() || rmap::folio_maybe_mapped_shared(k, f) {
        return None;
    }
    f.ref_add(1);
    Some(Isolated { addr, f, pmd_mapped: true })
}

/// The anon folios mapped in `[addr, stop)` of `table` whose every page
/// is mapped there once and nowhere else, each with a reference taken
/// (`folio_isolate_lru`).
fn isolate<'k>(k: &'k Kernel, mm: &Mm, pmd: PmdSlot, table: Pfn, addr: u64, stop: u64) -> Vec<Isolated<'k>> {
    let mut out = Vec::new();
    let Some(_ptl) = pte_lock_checked(&k.phys, pmd, table) else { return out };
    let mut a = addr;
    while a < stop {
        let (idx, pte) = (pte_index(a), load(&k.phys, table, pte_index(a)));
        if !pte.present() || pte.special() {
            a += PAGE_SIZE;
            continue;
        }
        let f = Folio::containing(&k.phys, pte.pfn());
        let max = ((stop - a) / PAGE_SIZE) as usize;
        let nr = if f.is_large() { folio_pte_batch(&k.phys, f, table, idx, pte, max, false).0 } else { 1 };
        if !f.test_anon() {
            a += nr as u64 * PAGE_SIZE;
            continue;
        }
        // Part of a large folio: split it (if no other MM may map it), and
        // look at the same entry again, now a page of its own.
        if nr as u64 != f.nr_pages() || pte.pfn() != f.pfn {
            // The era's question: folio_maybe_mapped_shared (6.15+),
            // folio_likely_mapped_shared before, page_mapcount in 6.1.
            let shared = rmap::folio_likely_mapped_shared(k, f, pte.pfn() - f.pfn);
            let split = !shared && split_folio_in_table(k, mm, (table, addr & !(PMD_SIZE - 1)), f, 0);
            if !split {
                a += nr as u64 * PAGE_SIZE;
            }
            continue;
        }
        a += nr as u64 * PAGE_SIZE;
        if rmap::folio_mapcount(k, f) != f.nr_pages() {
            Stats::inc(&k.stats.pageout_skipped_shared);
            continue;
        }
        f.ref_add(1);
        out.push(Isolated { addr: a - nr as u64 * PAGE_SIZE, f, pmd_mapped: false });
    }
    out
}

/// `shrink_folio_list` for one isolated anon folio, locked: a folio that
/// may be pinned stays; one in the swap cache keeps its slots; a large one
/// something else holds stays (it could not be split if need be:
/// `can_split_folio`); else it gets a run of slots (`folio_alloc_swap`,
/// then `folio_mark_dirty`: its bytes are nowhere else), and a large one
/// that gets none is split ([`swap_fallback`]). It is then unmapped
/// ([`try_to_unmap`]; if that fails part way it stays in the swap cache,
/// as Linux leaves it) and, if nothing else holds it
/// (`is_page_cache_freeable`: a FOLL_GET keeps it there, dirty and
/// unwritten), written out (`swap_writeout` on a synchronous device: done
/// at once), taken from the swap cache and freed (`__remove_mapping`).
/// Drops the isolation reference.
fn shrink_folio(k: &Kernel, mm: &Mm, pmd: PmdSlot, i: Isolated) {
    let f = i.f;
    if let Some(lock) = f.trylock().filter(|_| !f.maybe_dma_pinned()) {
        let slots = match k.folio_swap(f) {
            Some(e) => Some(e),
            None if f.is_large() && f.refcount() as u64 != rmap::folio_mapcount(k, f) + 1 => None,
            None => match k.add_to_swap(f) {
                Ok(e) => {
                    f.head().set(pg::DIRTY);
                    Some(e)
                }
                Err(_) if f.is_large() => {
                    drop(lock);
                    return swap_fallback(k, mm, pmd, i);
                }
                Err(_) => None,
            },
        };
        let freeable = || f.refcount() == 1 + f.nr_pages() as i32;
        if let Some(e) = slots.filter(|&e| try_to_unmap(k, mm, pmd, &i, e) && freeable()) {
            let dev = k.swap.as_ref().expect("a slot implies a device");
            f.head().clear(pg::DIRTY);
            for p in 0..f.nr_pages() {
                dev.write(&k.phys, SwpEntry { offset: e.offset + p, ..e }, f.pfn + p);
            }
            count_swpout(k, f);
            k.delete_from_swap_cache(f);
        }
    }
    k.folio_put_refs(f, 1);
}

/// A large folio that got no run of swap slots is split
/// (`split_folio_to_list`; a PMD mapping first), counted
/// (`thp_swpout_fallback` for PMD size, the mTHP `swpout_fallback`), and
/// its pages reclaimed one by one (`split_folio_to_list` puts them on the
/// list being reclaimed).
fn swap_fallback(k: &Kernel, mm: &Mm, pmd: PmdSlot, i: Isolated) {
    let f = i.f;
    if f.order() == PMD_ORDER {
        Stats::inc(&k.stats.thp_swpout_fallback);
    }
    Stats::inc(&k.stats.swpout_fallback[f.order() as usize]);
    if i.pmd_mapped {
        split_huge_pmd(k, mm, i.addr);
    }
    let (e, nr) = (pmd.load(&k.phys), f.nr_pages());
    let split = !e.is_none() && !e.huge() && {
        let ptl = pte_lock_checked(&k.phys, pmd, e.pfn());
        ptl.is_some() && split_folio_in_table(k, mm, (e.pfn(), i.addr & !(PMD_SIZE - 1)), f, 1)
    };
    // The reference taken at isolation, now on the first page (or still
    // on the whole folio).
    k.folio_put_refs(Folio::containing(&k.phys, f.pfn), 1);
    if split {
        for page in isolate(k, mm, pmd, e.pfn(), i.addr, i.addr + nr * PAGE_SIZE) {
            shrink_folio(k, mm, pmd, page);
        }
    }
}

/// `count_swpout_vm_event`: `pswpout` per page, `thp_swpout` for a
/// PMD-sized folio, the mTHP `swpout` stat per folio of its order.
fn count_swpout(k: &Kernel, f: Folio) {
    Stats::add(&k.stats.pswpout, f.nr_pages());
    if f.order() == PMD_ORDER {
        Stats::inc(&k.stats.thp_swpout);
    }
    if f.is_large() {
        Stats::inc(&k.stats.swpout[f.order() as usize]);
    }
}

/// `try_to_unmap` (`TTU_SPLIT_HUGE_PMD`) of the isolated folio, whose
/// slots start at `e`: a huge PMD is split first; then
/// [`try_to_unmap_one`] for each PTE, page by page as Linux does for an
/// anon folio. False if a PTE no longer maps its page or a page could not
/// be shared; the pages unmapped before it stay swapped out.
fn try_to_unmap(k: &Kernel, mm: &Mm, pmd: PmdSlot, i: &Isolated, e: SwpEntry) -> bool {
    if i.pmd_mapped {
        split_huge_pmd(k, mm, i.addr);
    }
    let e0 = pmd.load(&k.phys);
    if e0.is_none() || e0.huge() {
        return false;
    }
    (0..i.f.nr_pages()).all(|p| {
        let slot = SwpEntry { offset: e.offset + p, ..e };
        try_to_unmap_one(k, mm, (pmd, e0.pfn()), i.addr + p * PAGE_SIZE, i.f, p, slot)
    })
}

/// `try_to_unmap_one` for the PTE at `addr` mapping page `p` of the anon
/// folio `f`, whose slot is `e`: the entry is cleared and flushed, and
/// replaced by a swap entry naming the slot (`swap_duplicate`), exclusive
/// if the page was AnonExclusive (`folio_try_share_anon_rmap_pte` clears
/// that, and fails for a page that may be pinned: the entry is put back);
/// the mapping's rmap and reference go. False if the entry no longer maps
/// the page, or it could not be shared.
fn try_to_unmap_one(
    k: &Kernel,
    mm: &Mm,
    (pmd, table): (PmdSlot, Pfn),
    addr: u64,
    f: Folio,
    p: u64,
    e: SwpEntry,
) -> bool {
    let (phys, idx) = (&k.phys, pte_index(addr));
    let Some(_ptl) = pte_lock_checked(phys, pmd, table) else { return false };
    let pte = load(phys, table, idx);
    if !pte.present() || pte.special() || pte.pfn() != f.pfn + p {
        return false;
    }
    store(phys, table, idx, Pte::NONE);
    mm.tlb.flush_range(&k.stats, addr, addr + PAGE_SIZE);
    let exclusive = f.anon_exclusive(p);
    if exclusive && f.maybe_dma_pinned() {
        store(phys, table, idx, pte);
        return false;
    }
    let dev = k.swap.as_ref().expect("a slot implies a device");
    dev.duplicate(e, 1);
    f.set_anon_exclusive(p, false);
    store(phys, table, idx, Pte::swap(e, exclusive));
    mm.add_anon_rss(-1);
    mm.add_swap_rss(1);
    rmap::folio_remove_rmap(k, f, p, 1, Level::Pte, mm.rmap);
    f.put_refs(1);
    true
}
