//! Collapsing a shmem file's range (mm/khugepaged.c
//! `hpage_collapse_scan_file`, `collapse_file`, `retract_page_tables`,
//! `collapse_pte_mapped_thp`), for `MADV_COLLAPSE` and khugepaged: the
//! page cache's pages of one aligned PMD range are unmapped everywhere,
//! copied into a new PMD-sized folio (holes zero), which takes their place
//! in the cache; the page tables of the range's mappings, now empty, are
//! freed so that the next fault can map the THP by a PMD, and
//! `MADV_COLLAPSE` maps it in the caller's range at once.
//!
//! Differs from Linux: swapped-out pages are read back before the new
//! folio is allocated (Linux allocates first); the old pages are
//! unmapped while their tables are locked ([`super::super::folio_mappings`])
//! rather than by `try_to_unmap`, and only shared mappings' tables are
//! retracted, each only if every entry is none; 6.1's khugepaged leaves a
//! PTE-mapped THP for the MM's next scan (`khugepaged_add_pte_mapped_thp`)
//! where the model retracts it at once.

use super::super::folio_mappings::unmap_file_folio;
use super::super::zap::try_to_free_pte;
use super::{CollapseControl, HPAGE_PMD_NR};
use crate::arch::{Pte, PMD_ORDER, PMD_SIZE};
use crate::folio::thp::khugepaged::KhugepagedKnob;
use crate::folio::Folio;
use crate::kernel::{Kernel, ScanResult, Stats};
use crate::mapcount::Level;
use crate::mm_types::{Mm, MmList, Vma};
use crate::pgtable::{load, pte_lock_checked, pte_lockptr, store, walk_pmd};
use crate::phys::pg;
use crate::rmap;
use crate::shmem::{cache_refs, Inode};
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::Arc;
use crate::tlb::MmuGather;

/// `hpage_collapse_scan_file` + `collapse_file` for the PMD range at
/// `haddr` of `mm`, whose file pages from `start` it maps. A range that is
/// one PMD-sized folio already goes to [`collapse_pte_mapped_thp`] (which
/// maps it by a PMD for `MADV_COLLAPSE`; khugepaged counts it as collapsed
/// whether or not anything maps it); khugepaged wants at least
/// `HPAGE_PMD_NR - max_ptes_none` pages present (`SCAN_EXCEED_NONE_PTE`)
/// and asks no "mapped shared?" question of a file. After a collapse, the
/// tables of the range's mappings are retracted; `MADV_COLLAPSE` then maps
/// the THP in the caller's range.
pub fn collapse_file(
    k: &Kernel,
    mm: &Mm,
    inode: &Arc<Inode>,
    start: u64,
    haddr: u64,
    cc: CollapseControl,
) -> ScanResult {
    let mmlist = &mm.mmlist;
    let (mut present, mut nodes) = (0, super::NodeLoad::default());
    let swapped;
    {
        let pages = inode.pages.lock().unwrap();
        swapped = pages.swapped.range(start..start + HPAGE_PMD_NR as u64).count() as u32;
        if swapped > cc.limit(k, KhugepagedKnob::MaxPtesSwap) {
            Stats::inc(&k.stats.thp_scan_exceed_swap_pte);
            return ScanResult::ExceedSwapPte;
        }
        for &pfn in pages.range(start..start + HPAGE_PMD_NR as u64).map(|(_, p)| p) {
            let f = Folio::containing(&k.phys, pfn);
            if f.order() == PMD_ORDER && f.index() == start {
                drop(pages);
                return match collapse_pte_mapped_thp(k, mm, inode, (haddr, start), f, !cc.khugepaged) {
                    ScanResult::PmdMapped if cc.khugepaged => ScanResult::Succeed,
                    r => r,
                };
            }
            if !f.head().test(pg::LRU) {
                return ScanResult::PageLru;
            }
            if f.refcount() as u64 != cache_refs(f) as u64 + rmap::folio_mapcount(k, f) {
                return ScanResult::PageCount;
            }
            if f.pfn == pfn {
                nodes.add(k, pfn);
            }
            present += 1;
        }
    }
    if cc.khugepaged && present + k.thp.khugepaged.get(KhugepagedKnob::MaxPtesNone) < HPAGE_PMD_NR {
        Stats::inc(&k.stats.thp_scan_exceed_none_pte);
        return ScanResult::ExceedNonePte;
    }
    if present == 0 && swapped == 0 {
        return ScanResult::Truncated;
    }
    // collapse_file() reads the swapped-out pages back first.
    if inode.swapin_range(start, HPAGE_PMD_NR as u64).is_err() {
        return ScanResult::Fail;
    }
    // "drain lru cache to help folio_isolate_lru()".
    k.lru_add_drain();
    let Ok(new) = k.alloc_folio_on(nodes.target(k), PMD_ORDER, true) else {
        Stats::inc(&k.stats.thp_collapse_alloc_failed);
        return ScanResult::AllocHugePageFail;
    };
    Stats::inc(&k.stats.thp_collapse_alloc);
    let result = replace(k, mmlist, inode, start, new);
    if result != ScanResult::Succeed {
        k.folio_put_refs(new, 1);
        return result;
    }
    retract_page_tables(k, mmlist, inode, start, (mm, haddr), cc);
    if cc.khugepaged {
        return ScanResult::Succeed;
    }
    collapse_pte_mapped_thp(k, mm, inode, (haddr, start), new, true)
}

/// Under the cache's lock, the folios the range holds now (the scan let
/// the lock go: a fault or a migration may have changed them) are locked,
/// unmapped and checked (`SCAN_PAGE_LOCK`, `SCAN_PAGE_COUNT`: nothing but
/// the page cache may hold them then), copied into `new`, which takes
/// their cache entries; they are freed. `SCAN_FAIL` if the range became a
/// PMD-sized folio meanwhile.
fn replace(k: &Kernel, mmlist: &MmList, inode: &Inode, start: u64, new: Folio) -> ScanResult {
    let mut pages = inode.pages.lock().unwrap();
    // A page reclaim swapped out again after the swap-in.
    if pages.swapped.range(start..start + (1 << PMD_ORDER)).next().is_some() {
        return ScanResult::Fail;
    }
    let mut old: Vec<Folio> = Vec::new();
    for &pfn in pages.range(start..start + (1 << PMD_ORDER)).map(|(_, p)| p) {
        let f = Folio::containing(&k.phys, pfn);
        if f.order() == PMD_ORDER {
            return ScanResult::Fail;
        }
        if old.last().is_none_or(|l| l.pfn != f.pfn) {
            old.push(f);
        }
    }
    let mut locks = Vec::new();
    for &f in &old {
        let Some(lock) = f.trylock() else { return ScanResult::PageLock };
        locks.push(lock);
        let unmapped = unmap_file_folio(k, mmlist, f, true);
        if unmapped.is_err() || f.refcount() != cache_refs(f) {
            return ScanResult::PageCount;
        }
    }
    for (&idx, &pfn) in pages.range(start..start + (1 << PMD_ORDER)) {
        k.phys.copy_frame(new.pfn + (idx - start), pfn);
    }
    new.head().set(pg::SWAPBACKED | pg::UPTODATE | pg::DIRTY);
    new.head().link.store(inode.ino, Relaxed);
    new.set_index(start);
    new.ref_add(cache_refs(new) - 1);
    for i in 0..new.nr_pages() {
        pages.insert(start + i, new.pfn + i);
    }
    k.folio_add_lru(new);
    drop(locks);
    for &f in &old {
        f.head().link.store(0, Relaxed);
        k.folio_put_refs(f, cache_refs(f));
    }
    ScanResult::Succeed
}

/// `retract_page_tables`: every shared mapping of the range whose VMA holds
/// the whole aligned PMD range has its PTE table freed when every entry is
/// none, so that a fault can map the THP by a PMD; before 6.6 only the
/// caller's (`caller`: its MM and address) for `MADV_COLLAPSE`
/// ([`crate::release::KernelVersion::retracts_every_mapping`]), every one
/// for khugepaged. (Linux retracts a private one without an anon_vma too.)
fn retract_page_tables(
    k: &Kernel,
    mmlist: &MmList,
    inode: &Inode,
    start: u64,
    caller: (&Mm, u64),
    cc: CollapseControl,
) {
    let every = cc.khugepaged || k.config.release().retracts_every_mapping();
    let records = inode.i_mmap.read();
    for r in records.iter() {
        let Some((from, to)) = r.addresses(start, start + (1 << PMD_ORDER)) else { continue };
        let shared = r.flags & crate::mm_types::vm::SHARED != 0;
        if !from.is_multiple_of(PMD_SIZE) || to - from != PMD_SIZE || !shared {
            continue;
        }
        let Some(mm) = mmlist.get(r.mm) else { continue };
        let is_caller = std::ptr::eq(&*mm, caller.0) && from == caller.1;
        if !every && !is_caller {
            continue;
        }
        let _walk = mm.pt_read();
        let Some(pmd) = walk_pmd(&k.phys, mm.pgd, from) else { continue };
        let e = pmd.load(&k.phys);
        if e.is_none() || e.huge() {
            continue;
        }
        let mut tlb = MmuGather::new(k, &mm.tlb, false);
        try_to_free_pte(k, &mut tlb, pmd, e.pfn(), from);
    }
}

/// `collapse_pte_mapped_thp(install_pmd)`: the caller's PMD range at
/// `haddr`, where its VMA maps the PMD-sized `f`, made ready for a PMD: a
/// PTE table there whose entries are none or map `f`'s pages in place has
/// them cleared and is freed (`SCAN_FAIL` for another page,
/// `SCAN_PTE_NON_PRESENT` for a swap entry); then, with `install`, `f` is
/// mapped by the PMD. `SCAN_PMD_MAPPED` if a PMD maps it already;
/// `SCAN_VMA_CHECK` if the VMA there no longer maps `f`'s pages.
fn collapse_pte_mapped_thp(
    k: &Kernel,
    mm: &Mm,
    inode: &Inode,
    (haddr, index): (u64, u64),
    f: Folio,
    install: bool,
) -> ScanResult {
    // filemap_lock_folio(): the folio, with a reference, only if the cache
    // still holds it at the range's first index.
    {
        let pages = inode.pages.lock().unwrap();
        if pages.get(&index) != Some(&f.pfn) || f.order() != PMD_ORDER {
            return ScanResult::Fail;
        }
        f.ref_add(1);
    }
    let r = install_thp(k, mm, inode, haddr, f, install);
    k.folio_put_refs(f, 1);
    r
}

/// [`collapse_pte_mapped_thp`] once the folio is held.
fn install_thp(k: &Kernel, mm: &Mm, inode: &Inode, haddr: u64, f: Folio, install: bool) -> ScanResult {
    let vmas = mm.mmap_read_lock();
    let same_file = |v: &Vma| v.with_file(|x| x.is_some_and(|x| x.ino == inode.ino));
    // The mmap_lock was let go: the VMA there now must map the folio's
    // file pages at the same place.
    let fits = |v: &Vma| same_file(v) && v.end() >= haddr + PMD_SIZE && v.page_index(haddr) == f.index();
    let Some(vma) = vmas.find(haddr).filter(|v| fits(v)) else {
        return ScanResult::VmaCheck;
    };
    let _walk = mm.pt_read();
    let Some(pmd) = walk_pmd(&k.phys, mm.pgd, haddr) else {
        return if install { ScanResult::PmdNull } else { ScanResult::Succeed };
    };
    let e = pmd.load(&k.phys);
    if e.huge() {
        return if e.pfn() == f.pfn { ScanResult::PmdMapped } else { ScanResult::Fail };
    }
    if !e.is_none() {
        if let Err(r) = clear_ptes(k, mm, pmd, e.pfn(), haddr, f) {
            return r;
        }
        let mut tlb = MmuGather::new(k, &mm.tlb, false);
        try_to_free_pte(k, &mut tlb, pmd, e.pfn(), haddr);
    }
    if !install {
        return ScanResult::Succeed;
    }
    let _pl = pte_lockptr(&k.phys, pmd.table).lock();
    if !pmd.load(&k.phys).is_none() {
        return ScanResult::Fail;
    }
    f.ref_add(1);
    rmap::folio_add_file_rmap(k, f, 0, f.nr_pages(), Level::Pmd, mm.rmap);
    let write = if vma.shared() && vma.writable() { Pte::RW } else { 0 };
    pmd.store(&k.phys, Pte::new(f.pfn, Pte::PRESENT | Pte::USER | Pte::ACCESSED | Pte::PSE | write));
    mm.add_rss(f, f.nr_pages() as i64);
    ScanResult::Succeed
}

/// Steps 1 to 3 of `collapse_pte_mapped_thp` under the PTE table's lock:
/// every entry of `table` must be none or map page `i` of `f` at PTE `i`;
/// those mappings are removed (rmap, reference, RSS) and flushed.
fn clear_ptes(
    k: &Kernel,
    mm: &Mm,
    pmd: crate::pgtable::PmdSlot,
    table: crate::arch::Pfn,
    haddr: u64,
    f: Folio,
) -> Result<(), ScanResult> {
    let phys = &k.phys;
    let _ptl = pte_lock_checked(phys, pmd, table).ok_or(ScanResult::PmdNull)?;
    let mut mapped = Vec::new();
    for i in 0..HPAGE_PMD_NR as usize {
        let pte = load(phys, table, i);
        match pte {
            p if p.is_none() => {}
            p if !p.present() => return Err(ScanResult::PteNonPresent),
            p if p.special() || p.pfn() != f.pfn + i as u64 => return Err(ScanResult::Fail),
            _ => mapped.push(i),
        }
    }
    for &i in &mapped {
        store(phys, table, i, Pte::NONE);
        rmap::folio_remove_rmap(k, f, i as u64, 1, Level::Pte, mm.rmap);
    }
    if !mapped.is_empty() {
        mm.tlb.flush_range(&k.stats, haddr, haddr + PMD_SIZE);
        f.put_refs(mapped.len() as i32);
        mm.add_rss(f, -(mapped.len() as i64));
    }
    Ok(())
}
