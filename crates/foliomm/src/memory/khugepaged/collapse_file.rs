//! `MADV_COLLAPSE` of a shmem file's range (mm/khugepaged.c
//! `hpage_collapse_scan_file`, `collapse_file`, `retract_page_tables`,
//! `collapse_pte_mapped_thp`): the page cache's pages of one aligned PMD
//! range are unmapped everywhere, copied into a new PMD-sized folio (holes
//! zero), which takes their place in the cache; the page tables of every
//! mapping of the range, now empty, are freed so that the next fault can
//! map the THP by a PMD, and the caller's range is mapped by one at once.
//!
//! Differs from Linux: khugepaged does not scan file VMAs; no swapped
//! shmem pages (the model swaps anon memory only); the old pages are
//! unmapped while their tables are locked ([`super::super::folio_mappings`])
//! rather than by `try_to_unmap`, and only shared mappings' tables are
//! retracted, each only if every entry is none.

use super::super::folio_mappings::with_mappings;
use super::super::zap::try_to_free_pte;
use crate::arch::{Pte, PAGE_SIZE, PMD_ORDER, PMD_SIZE};
use crate::folio::Folio;
use crate::kernel::{Kernel, ScanResult, Stats};
use crate::mapcount::Level;
use crate::mm_types::{Mm, MmList, Vma};
use crate::pgtable::{pte_lockptr, walk_pmd};
use crate::phys::{pg, Placement};
use crate::rmap;
use crate::shmem::{cache_refs, Inode};
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::Arc;
use crate::tlb::MmuGather;

/// `hpage_collapse_scan_file` + `collapse_file` for `MADV_COLLAPSE` of the
/// PMD range at `haddr` of `mm`, whose file pages from `start` it maps;
/// then `collapse_pte_mapped_thp` maps the THP there by a PMD.
pub fn collapse_file(k: &Kernel, mm: &Mm, inode: &Arc<Inode>, start: u64, haddr: u64) -> ScanResult {
    let mmlist = &mm.mmlist;
    {
        let pages = inode.pages.lock().unwrap();
        let mut present = false;
        for &pfn in pages.range(start..start + (1 << PMD_ORDER)).map(|(_, p)| p) {
            let f = Folio::containing(&k.phys, pfn);
            if f.order() == PMD_ORDER && f.index() == start {
                drop(pages);
                return map_pmd(k, mm, inode, haddr, f);
            }
            if f.head().test(pg::ISOLATED) {
                return ScanResult::PageLru;
            }
            if f.refcount() as u64 != cache_refs(f) as u64 + rmap::folio_mapcount(k, f) {
                return ScanResult::PageCount;
            }
            present = true;
        }
        if !present {
            return ScanResult::Truncated;
        }
    }
    let Ok(new) = k.alloc_folio_on(Placement::LOCAL, PMD_ORDER, true) else {
        Stats::inc(&k.stats.thp_collapse_alloc_failed);
        return ScanResult::AllocHugePageFail;
    };
    Stats::inc(&k.stats.thp_collapse_alloc);
    let result = replace(k, mmlist, inode, start, new);
    if result != ScanResult::Succeed {
        k.folio_put_refs(new, 1);
        return result;
    }
    retract_page_tables(k, mmlist, inode, start, (mm, haddr));
    map_pmd(k, mm, inode, haddr, new)
}

/// Under the cache's lock, the folios the range holds now (the scan let
/// the lock go: a fault or a migration may have changed them) are locked,
/// unmapped and checked (`SCAN_PAGE_LOCK`, `SCAN_PAGE_COUNT`: nothing but
/// the page cache may hold them then), copied into `new`, which takes
/// their cache entries; they are freed. `SCAN_FAIL` if the range became a
/// PMD-sized folio meanwhile.
fn replace(k: &Kernel, mmlist: &MmList, inode: &Inode, start: u64, new: Folio) -> ScanResult {
    let mut pages = inode.pages.lock().unwrap();
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
        let unmapped = with_mappings(k, mmlist, f, true, |maps| {
            for m in maps {
                crate::pgtable::store(&k.phys, m.table, m.idx, Pte::NONE);
                rmap::folio_remove_rmap(k, f, m.page, 1, Level::Pte, m.mm.rmap);
                m.mm.add_rss(f, -1);
                m.mm.tlb.flush_range(&k.stats, m.addr, m.addr + PAGE_SIZE);
                f.put_refs(1);
            }
            Ok(())
        });
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
/// caller's (`caller`: its MM and address;
/// [`crate::release::KernelVersion::retracts_every_mapping`]). (Linux
/// retracts a private one without an anon_vma too.)
fn retract_page_tables(k: &Kernel, mmlist: &MmList, inode: &Inode, start: u64, caller: (&Mm, u64)) {
    let every = k.config.release().retracts_every_mapping();
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

/// `collapse_pte_mapped_thp(install_pmd)`: the PMD-sized `f` mapped by the
/// caller's PMD at `haddr` if nothing is mapped there (its table
/// retracted): `SCAN_SUCCEED`; `SCAN_PMD_MAPPED` if a PMD maps it already;
/// `SCAN_FAIL` if a PTE table is still there.
fn map_pmd(k: &Kernel, mm: &Mm, inode: &Inode, haddr: u64, f: Folio) -> ScanResult {
    let vmas = mm.mmap_read_lock();
    let same_file = |v: &Vma| v.with_file(|x| x.is_some_and(|x| x.ino == inode.ino));
    // The mmap_lock was let go: the VMA there now must map the folio's
    // file pages at the same place.
    let fits = |v: &Vma| same_file(v) && v.end() >= haddr + PMD_SIZE && v.page_index(haddr) == f.index();
    let Some(vma) = vmas.find(haddr).filter(|v| fits(v)) else {
        return ScanResult::VmaNull;
    };
    let _walk = mm.pt_read();
    let Some(pmd) = walk_pmd(&k.phys, mm.pgd, haddr) else { return ScanResult::PmdNull };
    let _pl = pte_lockptr(&k.phys, pmd.table).lock();
    let e = pmd.load(&k.phys);
    if e.huge() && e.pfn() == f.pfn {
        return ScanResult::PmdMapped;
    }
    if !e.is_none() {
        return ScanResult::Fail;
    }
    f.ref_add(1);
    rmap::folio_add_file_rmap(k, f, 0, f.nr_pages(), Level::Pmd, mm.rmap);
    let write = if vma.shared() && vma.writable() { Pte::RW } else { 0 };
    pmd.store(&k.phys, Pte::new(f.pfn, Pte::PRESENT | Pte::USER | Pte::ACCESSED | Pte::PSE | write));
    mm.add_rss(f, f.nr_pages() as i64);
    ScanResult::Succeed
}
