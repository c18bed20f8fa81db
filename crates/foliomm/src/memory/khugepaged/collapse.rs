//! `collapse_huge_page` (mm/khugepaged.c): a new PMD-sized folio takes the
//! place of the 512 PTEs of a range, their pages copied into it (none and
//! zero-page entries become zeros), the PTE table kept as the PMD's
//! deposit, the old folios unmapped and put back or freed.
//!
//! Differs from Linux: the folio is allocated without reclaim or
//! compaction; the VMA's own anon_vma is write-locked while the PMD is
//! cleared and the pages isolated (Linux locks the root's, shared by every
//! anon_vma of the tree; foliomm's rmap walkers that come through another
//! anon_vma find the PMD cleared, or the folios locked, and give up).

use super::{find_pmd, none_or_zero, revalidate, CollapseControl, ScanResult, Scanned, HPAGE_PMD_NR};
use crate::arch::{pte_index, Pte, PAGE_SIZE, PMD_ORDER, PMD_SIZE};
use crate::folio::Folio;
use crate::kernel::lru::LruList;
use crate::kernel::{Kernel, Stats};
use crate::mapcount::Level;
use crate::memory::handle_mm_fault;
use crate::mm_types::{Mm, Vma};
use crate::pgtable::{load, pte_lockptr, store};
use crate::phys::pg;
use crate::rmap;
use crate::sync::BitSpinLock;
use crate::tlb::mmu_gather::free_swap_cache;

/// A folio isolated for the collapse: locked, off the LRU, with the
/// isolation's reference.
struct Isolated<'k> {
    folio: Folio<'k>,
    _lock: BitSpinLock<'k>,
}

/// `collapse_huge_page` for the PMD range at `haddr` that [`super::scan_pmd`]
/// found worth it (`scanned`), the mmap_lock not held: allocates the THP on
/// the node holding most of the range's pages (`thp_collapse_alloc`, or `thp_collapse_alloc_failed` and
/// `SCAN_ALLOC_HUGE_PAGE_FAIL`), swaps in the swapped-out pages under the
/// mmap_lock for read (`__collapse_huge_page_swapin`), then, under it for
/// write with the VMA write-locked, clears the PMD and flushes
/// (`pmdp_collapse_flush`), isolates every mapped folio
/// (`__collapse_huge_page_isolate`; on failure the PMD is restored), copies
/// and maps the new folio with a PMD, AnonExclusive.
pub fn collapse_huge_page(k: &Kernel, mm: &Mm, haddr: u64, scanned: Scanned, cc: CollapseControl) -> ScanResult {
    let Ok(new) = k.alloc_folio_on(scanned.nodes.target(k), PMD_ORDER, false) else {
        Stats::inc(&k.stats.thp_collapse_alloc_failed);
        return ScanResult::AllocHugePageFail;
    };
    Stats::inc(&k.stats.thp_collapse_alloc);
    let r = swap_in_and_collapse(k, mm, haddr, new, scanned, cc);
    if r != ScanResult::Succeed {
        k.folio_put_refs(new, 1);
    }
    r
}

fn swap_in_and_collapse(
    k: &Kernel,
    mm: &Mm,
    haddr: u64,
    new: Folio,
    scanned: Scanned,
    cc: CollapseControl,
) -> ScanResult {
    if scanned.unmapped > 0 {
        let vmas = mm.mmap_read_lock();
        let vma = match revalidate(k, &vmas, haddr, true, cc) {
            Ok(v) => v,
            Err(r) => return r,
        };
        if let Err(r) = find_pmd(k, mm, haddr) {
            return r;
        }
        for a in (haddr..haddr + PMD_SIZE).step_by(PAGE_SIZE as usize) {
            let swapped = find_pmd(k, mm, a).is_ok_and(|(_, t)| load(&k.phys, t, pte_index(a)).is_swap());
            if swapped && handle_mm_fault(mm, &vma, a, false).is_err() {
                return ScanResult::Fail;
            }
        }
        // The swapped-in folios wait in this CPU's LRU batch, whose
        // reference would fail their isolation: drained.
        k.lru_add_drain();
    }
    let vmas = mm.mmap_write_lock();
    let vma = match revalidate(k, &vmas, haddr, true, cc) {
        Ok(v) => v,
        Err(r) => return r,
    };
    vmas.start_write(&vma);
    let (pmd, table) = match find_pmd(k, mm, haddr) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let av = mm.mmlist.anon_vma(vma.anon_vma.get()).expect("a VMA's anon_vma is registered");
    let rmap_lock = av.tree.write();
    let orig = {
        let _pl = pte_lockptr(&k.phys, pmd.table).lock();
        let orig = pmd.load(&k.phys);
        pmd.store(&k.phys, Pte::NONE);
        orig
    };
    mm.tlb.flush_range(&k.stats, haddr, haddr + PMD_SIZE);
    let isolated = {
        let _ptl = pte_lockptr(&k.phys, table).lock();
        isolate(k, table, cc)
    };
    let isolated = match isolated {
        Ok(i) => i,
        Err(r) => {
            let _pl = pte_lockptr(&k.phys, pmd.table).lock();
            pmd.store(&k.phys, orig);
            return r;
        }
    };
    drop(rmap_lock);
    copy_and_unmap(k, mm, table, new, isolated);
    // The new folio's allocation reference is the PMD's.
    let anon_vma = vma.anon_vma.get();
    let _pl = pte_lockptr(&k.phys, pmd.table).lock();
    rmap::folio_add_new_anon_rmap(k, new, Level::Pmd, mm.rmap, (anon_vma, vma.page_index(haddr)));
    k.folio_add_lru_vma(new, vma.mlocked());
    k.deferred_split_new_thp(new);
    super::super::huge_memory::deposit(mm, haddr, table);
    pmd.store(&k.phys, new_pmd(new, &vma));
    ScanResult::Succeed
}

/// `folio_mk_pmd` + `pmd_mkdirty` + `maybe_pmd_mkwrite` under the VMA's
/// protection.
fn new_pmd(f: Folio, vma: &Vma) -> Pte {
    let e = Pte::new(f.pfn, Pte::PRESENT | Pte::USER | Pte::PSE | Pte::ACCESSED | Pte::MKDIRTY);
    e.modify_prot(vma.readable(), vma.writable())
}

/// `__collapse_huge_page_isolate` on the detached `table`, its lock held:
/// every folio mapped there is locked (trylock), checked to be held by its
/// mappings alone and taken off the LRU, each large one once. On failure
/// the folios taken so far go back ([`release`]).
fn isolate<'k>(k: &'k Kernel, table: u64, cc: CollapseControl) -> Result<Vec<Isolated<'k>>, ScanResult> {
    use crate::folio::thp::khugepaged::KhugepagedKnob;
    let mut out: Vec<Isolated> = Vec::new();
    let (mut none, mut shared, mut referenced) = (0, 0, 0);
    let fail = |out: Vec<Isolated>, r: ScanResult| {
        release(k, out);
        Err(r)
    };
    for i in 0..HPAGE_PMD_NR as usize {
        let pte = load(&k.phys, table, i);
        if none_or_zero(k, pte) {
            none += 1;
            if none > cc.limit(k, KhugepagedKnob::MaxPtesNone) {
                Stats::inc(&k.stats.thp_scan_exceed_none_pte);
                return fail(out, ScanResult::ExceedNonePte);
            }
            continue;
        }
        if !pte.present() {
            return fail(out, ScanResult::PteNonPresent);
        }
        if pte.special() {
            return fail(out, ScanResult::PageNull);
        }
        let f = Folio::containing(&k.phys, pte.pfn());
        if crate::rmap::page_maybe_mapped_shared(k, f, pte.pfn() - f.pfn) {
            shared += 1;
            if shared > cc.limit(k, KhugepagedKnob::MaxPtesShared) {
                Stats::inc(&k.stats.thp_scan_exceed_shared_pte);
                return fail(out, ScanResult::ExceedSharedPte);
            }
        }
        let seen = f.is_large() && out.iter().any(|o| o.folio.pfn == f.pfn);
        if !seen {
            let Some(lock) = f.trylock() else {
                return fail(out, ScanResult::PageLock);
            };
            if f.refcount() as u64 != super::expected_refs(k, f) {
                drop(lock);
                return fail(out, ScanResult::PageCount);
            }
            if !k.lru.isolate(f) {
                drop(lock);
                return fail(out, ScanResult::DelPageLru);
            }
            out.push(Isolated { folio: f, _lock: lock });
        }
        if cc.khugepaged && (pte.0 & Pte::ACCESSED != 0 || f.head().test(pg::REFERENCED)) {
            referenced += 1;
        }
    }
    if cc.khugepaged && referenced == 0 {
        return fail(out, ScanResult::LackReferencedPage);
    }
    Ok(out)
}

/// `release_pte_pages`: each isolated folio back on its LRU list,
/// unlocked, the isolation's reference dropped.
fn release(k: &Kernel, isolated: Vec<Isolated>) {
    for Isolated { folio, _lock } in isolated {
        putback(k, folio);
        drop(_lock);
        k.folio_put_refs(folio, 1);
    }
}

/// `folio_putback_lru`'s list choice: the one its PG_active names.
fn putback(k: &Kernel, f: Folio) {
    let which = if f.head().test(pg::ACTIVE) { LruList::Active } else { LruList::Inactive };
    k.lru.putback(f, which);
}

/// `__collapse_huge_page_copy` + `__collapse_huge_page_copy_succeeded`:
/// page `i` of `new` gets the bytes of the page PTE `i` maps, or zeros;
/// then every entry is cleared, each none or zero-page one adding a page
/// to the MM's anon RSS, each mapped page's mapping and reference
/// dropped; the isolated folios are put back and unlocked (those mapped
/// nowhere else then free, leaving the swap cache).
fn copy_and_unmap(k: &Kernel, mm: &Mm, table: u64, new: Folio, isolated: Vec<Isolated>) {
    let phys = &k.phys;
    let _ptl = pte_lockptr(phys, table).lock();
    for i in 0..HPAGE_PMD_NR as usize {
        let pte = load(phys, table, i);
        if none_or_zero(k, pte) {
            phys.clear_frames(new.pfn + i as u64, 1);
        } else {
            phys.copy_frame(new.pfn + i as u64, pte.pfn());
        }
    }
    for i in 0..HPAGE_PMD_NR as usize {
        let pte = load(phys, table, i);
        if none_or_zero(k, pte) {
            mm.add_anon_rss(1);
            store(phys, table, i, Pte::NONE);
            continue;
        }
        let f = Folio::containing(phys, pte.pfn());
        store(phys, table, i, Pte::NONE);
        rmap::folio_remove_rmap(k, f, pte.pfn() - f.pfn, 1, Level::Pte, mm.rmap);
        k.folio_put_refs(f, 1);
    }
    drop(_ptl);
    for Isolated { folio, _lock } in isolated {
        drop(_lock);
        free_swap_cache(k, folio);
        putback(k, folio);
        k.folio_put_refs(folio, 1);
    }
}
