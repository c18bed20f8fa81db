//! `MADV_FREE` (mm/madvise.c `madvise_free_pte_range`, mm/huge_memory.c
//! `madvise_free_huge_pmd`, mm/swap.c `folio_mark_lazyfree`): the anon
//! folios of a private range mapped only here become lazily freed. Their
//! entries and the folio lose the dirty bit and the folio `PG_swapbacked`;
//! reclaim then drops such a folio instead of swapping it, unless a write
//! dirtied an entry again ([`super::vmscan`]). Swap entries in the range
//! are dropped at once (a later read sees zeros).
//!
//! "Mapped shared" decides here ([`Consumer::LazyFree`]): a folio another
//! process may map is left alone, since dropping it would take its bytes
//! from that process too. A dirty or swap-cached folio needs every page
//! mapped once (`folio_mapcount == folio_nr_pages`); a large folio the
//! range covers in part is split first unless it may be mapped shared
//! (6.10 on: "mm/madvise: optimize lazyfreeing with mTHP in madvise_free";
//! before, every PTE-mapped large folio is split unless the era's guess
//! says it is mapped shared, which ends the walk of its page table).
//! Differs from Linux: 6.3 and 6.4 asked `folio_mapcount() != 1` (a
//! regression 6.5 fixed, "madvise:madvise_free_pte_range(): don't use
//! mapcount() against large folio for sharing check"); foliomm asks those
//! releases the era's guess too.
//!
//! A small folio waits in the LRU batch before it is lazily freed
//! ([`Kernel::folio_mark_lazyfree`]).
//!
//! Differs from Linux: lazily freed folios stay on the anon inactive list
//! (Linux moves them to the file LRU); the folio lock is taken with the
//! page table's lock held, as a trylock.

use super::madvise_cold::{for_each_pmd, split_and_put};
use super::swap::{free_swap_and_cache_nr, swap_pte_batch};
use crate::arch::{pte_index, Pfn, Pte, PAGE_SIZE, PMD_SIZE};
use crate::folio::Folio;
use crate::kernel::{Consumer, Kernel};
use crate::mm_types::Mm;
use crate::pgtable::{folio_pte_batch, load, pte_lock_checked, pte_lockptr, store, PmdSlot};
use crate::phys::pg;
use crate::rmap;

/// The young and dirty bits `MADV_FREE` clears (`CYDP_CLEAR_YOUNG |
/// CYDP_CLEAR_DIRTY`; soft-dirty stays).
const YOUNG_DIRTY: u64 = Pte::ACCESSED | Pte::DIRTY;

/// `madvise_free_single_vma` over `[start, end)` of one anonymous VMA of
/// `mm` (the caller holds the mmap_lock for read and checked the VMA).
pub fn madvise_free_range(k: &Kernel, mm: &Mm, start: u64, end: u64) {
    k.lru_add_drain();
    for_each_pmd(k, mm, (start, end), |pmd, range| {
        if pmd.load(&k.phys).huge() && free_huge_pmd(k, mm, pmd, range) {
            return;
        }
        let e = pmd.load(&k.phys);
        if !e.is_none() && !e.huge() {
            free_pte_range(k, mm, pmd, e.pfn(), range);
        }
    });
}

/// `madvise_free_huge_pmd`: true if the huge PMD was dealt with (the huge
/// zero page, a THP left alone as maybe mapped shared, or one marked
/// lazily freed); false after splitting a THP the range covers in part, or
/// when the PMD is no longer huge: the caller walks its PTEs.
fn free_huge_pmd(k: &Kernel, mm: &Mm, pmd: PmdSlot, (addr, stop): (u64, u64)) -> bool {
    let pl = pte_lockptr(&k.phys, pmd.table).lock();
    let e = pmd.load(&k.phys);
    if !e.huge() {
        return false;
    }
    if e.special() {
        return true;
    }
    let f = Folio::from_head(&k.phys, e.pfn());
    // 6.1 asks total_mapcount() != 1.
    let shared = match k.config.release().lazyfree_batches_large_folios() {
        true => rmap::folio_maybe_mapped_shared(k, f),
        false => rmap::folio_mapcount(k, f) != 1,
    };
    if k.decided(Consumer::LazyFree, f, shared) {
        return true;
    }
    let Some(lock) = f.trylock() else { return true };
    if stop - addr != PMD_SIZE {
        drop((lock, pl));
        if f.try_get() {
            split_and_put(k, mm, f);
        }
        return false;
    }
    f.head().clear(pg::DIRTY);
    drop(lock);
    if e.0 & YOUNG_DIRTY != 0 {
        pmd.store(&k.phys, e.without(YOUNG_DIRTY));
        mm.tlb.flush_range(&k.stats, addr, addr + PMD_SIZE);
    }
    k.folio_mark_lazyfree(f);
    true
}

/// `madvise_free_pte_range` over `[addr, stop)` of the PTE table `table`.
fn free_pte_range(k: &Kernel, mm: &Mm, pmd: PmdSlot, table: Pfn, (addr, stop): (u64, u64)) {
    let phys = &k.phys;
    let batches = k.config.release().lazyfree_batches_large_folios();
    let mut a = addr;
    'locked: while let Some(ptl) = pte_lock_checked(phys, pmd, table) {
        while a < stop {
            let (idx, pte) = (pte_index(a), load(phys, table, pte_index(a)));
            let max = ((stop - a) / PAGE_SIZE) as usize;
            if pte.is_swap() {
                // A swapped-out page is dropped rather than read back.
                let nr = swap_pte_batch(phys, table, idx, pte, max);
                free_swap_and_cache_nr(k, pte.swp_entry(), nr as u64);
                (idx..idx + nr).for_each(|i| store(phys, table, i, Pte::NONE));
                mm.add_swap_rss(-(nr as i64));
                a += nr as u64 * PAGE_SIZE;
                continue;
            }
            if !pte.present() || pte.special() {
                a += PAGE_SIZE;
                continue;
            }
            let f = Folio::containing(phys, pte.pfn());
            let nr = match (f.is_large(), batches) {
                (false, _) => 1,
                (true, true) => folio_pte_batch(phys, f, table, idx, pte, max, 0).0,
                // Before 6.10 any large folio is split, if the era's guess
                // says one process maps it; else the walk of this table ends.
                (true, false) => 0,
            };
            if nr as u64 != f.nr_pages() || pte.pfn() != f.pfn {
                // The era's guess: 6.1 the page at hand's mapcount, 6.5 on
                // the first page's (folio_estimated_sharers), 6.10 on
                // folio_likely_mapped_shared, 6.15 on folio_maybe_mapped_shared.
                let shared = rmap::folio_likely_mapped_shared(k, f, pte.pfn() - f.pfn);
                if k.decided(Consumer::LazyFree, f, shared) || !f.try_get() {
                    if !batches {
                        return;
                    }
                    a += nr as u64 * PAGE_SIZE;
                    continue;
                }
                drop(ptl);
                // Split, the same entry is looked at again; a folio that
                // did not split is passed over (6.1: the walk ends).
                match (split_and_put(k, mm, f), batches) {
                    (true, _) => {}
                    (false, true) => a += nr as u64 * PAGE_SIZE,
                    (false, false) => return,
                }
                continue 'locked;
            }
            a += nr as u64 * PAGE_SIZE;
            if !clear_folio_dirty(k, f) {
                continue;
            }
            let any = (idx..idx + nr).fold(0, |bits, i| bits | load(phys, table, i).0) & YOUNG_DIRTY;
            if any != 0 {
                (idx..idx + nr).for_each(|i| store(phys, table, i, load(phys, table, i).without(YOUNG_DIRTY)));
                mm.tlb.flush_range(&k.stats, a - nr as u64 * PAGE_SIZE, a);
            }
            k.folio_mark_lazyfree(f);
        }
        break;
    }
}

/// The branch of `madvise_free_pte_range` for a folio that is dirty or in
/// the swap cache: only if every page is mapped once (here: the folio is
/// covered whole) does it leave the swap cache and lose its dirty bit.
/// Returns false if the folio must be left alone.
fn clear_folio_dirty(k: &Kernel, f: Folio) -> bool {
    let cached = k.folio_swap(f).is_some();
    if !cached && !f.head().test(pg::DIRTY) {
        return true;
    }
    let Some(_lock) = f.trylock() else { return false };
    let shared = rmap::folio_mapcount(k, f) != f.nr_pages();
    let shared = if f.is_large() { k.decided(Consumer::LazyFree, f, shared) } else { shared };
    if shared || (cached && !k.folio_free_swap(f)) {
        return false;
    }
    f.head().clear(pg::DIRTY);
    true
}
