//! PMD-mapped THP (mm/huge_memory.c): the PMD anonymous fault with the huge
//! zero folio, write faults on a huge PMD, splitting a PMD into 512 PTEs,
//! fork's `copy_huge_pmd`, `zap_huge_pmd`, `move_huge_pmd` and
//! `change_huge_pmd`. Every PMD-mapped anon entry has a deposited PTE table
//! (`pgtable_trans_huge_deposit`), used when the PMD is split; a PMD-mapped
//! shmem folio has none (x86 deposits only for anon): splitting its PMD
//! unmaps it, and fork leaves it to be refaulted.

use super::fault::VmFault;
use super::vmscan::alloc_table_reclaim;
use crate::arch::{Pte, PMD_ORDER, PMD_SIZE};
use crate::folio::Folio;
use crate::kernel::{Kernel, Stats};
use crate::mapcount::Level;
use crate::mm_types::{Mm, UffdReason, Vma};
use crate::pgtable::{self, pte_lockptr, walk_pmd, PmdSlot};
use crate::phys::pg;
use crate::rmap;
use crate::sync::atomic::Ordering::Relaxed;
use crate::tlb::MmuGather;
use crate::Result;

const HPAGE_NR: u64 = 1 << PMD_ORDER;

/// What a huge-PMD handler did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Huge {
    /// Handled (or raced with another fault: retry the access).
    Done,
    /// `VM_FAULT_FALLBACK`: handle at PTE level.
    Fallback,
}

/// `pgtable_trans_huge_deposit`: `table` waits under the huge PMD at
/// `haddr` for the day it is split.
pub(crate) fn deposit(mm: &Mm, haddr: u64, table: u64) {
    let old = mm.deposits.lock().unwrap().insert(haddr, table);
    debug_assert!(old.is_none(), "two deposits for one PMD");
}

fn withdraw(mm: &Mm, haddr: u64) -> u64 {
    mm.deposits.lock().unwrap().remove(&haddr).expect("huge PMD without a deposited table")
}

/// `do_huge_pmd_anonymous_page`: a read fault maps the huge zero folio; a
/// write fault allocates, zeroes and maps a PMD-sized folio. Falls back to
/// PTEs when no PMD-order block is free.
pub(super) fn do_huge_pmd_anonymous_page(vmf: &VmFault) -> Result<Huge> {
    let (k, mm, vma, pmd) = (vmf.k, vmf.mm, vmf.vma, vmf.pmd);
    let haddr = vmf.address & !(PMD_SIZE - 1);
    let phys = &k.phys;
    // vmf_anon_prepare() comes first: a VMA with the huge zero folio has an
    // anon_vma, so fork copies its PMD (vma_needs_copy).
    let anon_vma = mm.anon_vma_prepare(vma);
    super::khugepaged::khugepaged_enter_vma(k, mm, vma, vma.flags());
    if !vmf.write() {
        let Some(zero) = k.huge_zero_pfn() else {
            return Ok(Huge::Fallback);
        };
        let table = alloc_table_reclaim(k, &mm.mmlist)?;
        let _pl = pte_lockptr(phys, pmd.table).lock();
        if !pmd.load(phys).is_none() {
            drop(_pl);
            k.free_table(table);
            return Ok(Huge::Done);
        }
        if vma.userfaultfd_missing() {
            drop(_pl);
            k.free_table(table);
            return Err(vmf.userfault(UffdReason::Missing));
        }
        deposit(mm, haddr, table);
        pmd.store(phys, Pte::new(zero, Pte::PRESENT | Pte::USER | Pte::PSE | Pte::SPECIAL | Pte::ACCESSED));
        Stats::inc(&k.stats.huge_zero_map);
        return Ok(Huge::Done);
    }
    let Ok(f) = k.alloc_folio_on(vma.placement(haddr, PMD_ORDER), PMD_ORDER, true) else {
        Stats::inc(&k.stats.thp_fault_fallback);
        Stats::inc(&k.stats.anon_fault_fallback[PMD_ORDER as usize]);
        return Ok(Huge::Fallback);
    };
    count_thp_fault_alloc(k, true);
    let table = match alloc_table_reclaim(k, &mm.mmlist) {
        Ok(t) => t,
        Err(e) => {
            k.folio_put_refs(f, 1);
            return Err(e);
        }
    };
    let pl = pte_lockptr(phys, pmd.table).lock();
    if !pmd.load(phys).is_none() || vma.userfaultfd_missing() {
        drop(pl);
        k.folio_put_refs(f, 1);
        k.free_table(table);
        if vma.userfaultfd_missing() {
            return Err(vmf.userfault(UffdReason::Missing));
        }
        return Ok(Huge::Done);
    }
    rmap::folio_add_new_anon_rmap(k, f, Level::Pmd, mm.rmap, (anon_vma, vma.page_index(haddr)));
    k.folio_add_lru_vma(f, vma.mlocked());
    deposit(mm, haddr, table);
    map_anon_pmd(k, mm, pmd, f, vma);
    k.deferred_split_new_thp(f);
    drop(pl);
    count_thp_fault_alloc(k, false);
    Ok(Huge::Done)
}

/// Counts a THP a fault allocated (`THP_FAULT_ALLOC`, the PMD order's
/// `anon_fault_alloc`): from 6.13 once allocated (`vma_alloc_anon_folio_pmd`,
/// even if the fault then gives it back: a racing fault mapped the PMD,
/// or a userfaultfd takes the fault); before, once mapped. `allocated`
/// says which of the two moments the caller is at.
fn count_thp_fault_alloc(k: &Kernel, allocated: bool) {
    if k.config.release().counts_thp_fault_alloc_when_allocated() == allocated {
        Stats::inc(&k.stats.thp_fault_alloc);
        Stats::inc(&k.stats.anon_fault_alloc[PMD_ORDER as usize]);
    }
}

/// `map_anon_folio_pmd`: installs a new, writable, dirty PMD for `f`.
fn map_anon_pmd(k: &Kernel, mm: &Mm, pmd: PmdSlot, f: Folio, vma: &Vma) {
    let w = if vma.writable() { Pte::RW } else { 0 };
    pmd.store(&k.phys, Pte::new(f.pfn, Pte::PRESENT | Pte::USER | Pte::PSE | Pte::ACCESSED | Pte::MKDIRTY | w));
    mm.add_anon_rss(HPAGE_NR as i64);
}

/// `do_huge_pmd_wp_page`: a write to a read-only huge PMD. The huge zero
/// folio is replaced by a new THP (`do_huge_zero_wp_pmd`), or in the older
/// eras split into zero-page PTEs so that the fault copies one page (see
/// [`crate::release::KernelVersion::allocates_thp_on_huge_zero_write`]); an anon THP is
/// reused in place if its head is AnonExclusive or the PMD holds the only
/// reference; otherwise the PMD is split and the fault falls back to PTEs.
/// With `unshare` a reused PMD stays read-only.
pub(super) fn do_huge_pmd_wp_page(vmf: &VmFault) -> Result<Huge> {
    let (k, mm, vma, pmd, addr, orig) = (vmf.k, vmf.mm, vmf.vma, vmf.pmd, vmf.address, vmf.orig);
    let phys = &k.phys;
    if orig.special() && !k.config.release().allocates_thp_on_huge_zero_write() {
        split_huge_pmd(k, mm, addr);
        return Ok(Huge::Fallback);
    }
    if orig.special() {
        let anon_vma = mm.anon_vma_prepare(vma);
        let place = vma.placement(addr & !(PMD_SIZE - 1), PMD_ORDER);
        let Ok(f) = k.alloc_folio_on(place, PMD_ORDER, true) else {
            Stats::inc(&k.stats.thp_fault_fallback);
            split_huge_pmd(k, mm, addr);
            return Ok(Huge::Fallback);
        };
        count_thp_fault_alloc(k, true);
        let pl = pte_lockptr(phys, pmd.table).lock();
        if pmd.load(phys) != orig {
            drop(pl);
            k.folio_put_refs(f, 1);
            return Ok(Huge::Done);
        }
        pmd.store(phys, Pte::NONE);
        mm.tlb.flush_range(&k.stats, addr & !(PMD_SIZE - 1), (addr & !(PMD_SIZE - 1)) + PMD_SIZE);
        rmap::folio_add_new_anon_rmap(k, f, Level::Pmd, mm.rmap, (anon_vma, vma.page_index(addr & !(PMD_SIZE - 1))));
        k.folio_add_lru_vma(f, vma.mlocked());
        map_anon_pmd(k, mm, pmd, f, vma);
        count_thp_fault_alloc(k, false);
        return Ok(Huge::Done);
    }
    {
        let _pl = pte_lockptr(phys, pmd.table).lock();
        if pmd.load(phys) != orig {
            return Ok(Huge::Done);
        }
        let f = Folio::from_head(phys, orig.pfn());
        // wp_huge_pmd(): a file PMD is split (unmapped) and refaulted.
        let reuse = f.test_anon() && f.anon_exclusive(0) || {
            let locked = f.trylock();
            let sole = f.test_anon() && locked.is_some() && f.refcount() == 1;
            if sole {
                f.set_anon_exclusive(0, true);
            }
            sole
        };
        if reuse {
            if !vmf.unshare() {
                pmd.store(phys, orig.with(Pte::ACCESSED | Pte::MKDIRTY | Pte::RW));
                Stats::inc(&k.stats.thp_reuse_pmd);
            }
            return Ok(Huge::Done);
        }
    }
    split_huge_pmd(k, mm, addr);
    Ok(Huge::Fallback)
}

/// `__split_huge_pmd`: splits the huge PMD covering `addr`, if any.
pub(crate) fn split_huge_pmd(k: &Kernel, mm: &Mm, addr: u64) {
    let phys = &k.phys;
    let Some(pmd) = walk_pmd(phys, mm.pgd, addr) else {
        return;
    };
    let _pl = pte_lockptr(phys, pmd.table).lock();
    let e = pmd.load(phys);
    if e.huge() {
        split_huge_pmd_locked(k, mm, pmd, addr & !(PMD_SIZE - 1), e);
    }
}

/// `__split_huge_pmd_locked` without freezing: the deposited table is filled
/// with 512 PTEs carrying the PMD's bits; for an anon THP the refcount grows
/// by 511 and the 512 PTE mappings are added (AnonExclusive propagated from
/// the head) before the PMD mapping is removed: in one batched rmap call
/// where the design's era batches (6.8+, seed 000's patch 14), else one
/// call per PTE as it is set (`page_add_anon_rmap`). The huge zero folio
/// becomes 512 zero-page PTEs.
fn split_huge_pmd_locked(k: &Kernel, mm: &Mm, pmd: PmdSlot, haddr: u64, e: Pte) {
    let phys = &k.phys;
    if !e.special() && !Folio::from_head(phys, e.pfn()).test_anon() {
        return unmap_file_pmd(k, mm, pmd, haddr, e);
    }
    let table = withdraw(mm, haddr);
    // pmdp_invalidate(): no CPU may use the huge entry (its TLB entries are
    // flushed) before any PTE can be used; a walker without the lock still
    // sees a huge entry, not none, and takes the lock (x86's pmd_present
    // and pmd_trans_huge look at _PAGE_PSE).
    pmd.store(phys, e.without(Pte::PRESENT));
    mm.tlb.flush_range(&k.stats, haddr, haddr + PMD_SIZE);
    Stats::inc(&k.stats.thp_split_pmd);
    // A dirty PMD dirties the folio (`folio_set_dirty`); before 6.2 the
    // PTEs are left clean, from 6.2 `pte_mkdirty` re-applies the dirty bit,
    // soft-dirty with it.
    if e.dirty() && !e.special() {
        Folio::from_head(phys, e.pfn()).head().set(pg::DIRTY);
    }
    let bits = match (e.dirty(), k.config.release().pmd_split_dirties_ptes()) {
        (true, true) => e.with(Pte::MKDIRTY),
        (true, false) => e.without(Pte::DIRTY),
        _ => e,
    }
    .without(Pte::PSE | Pte::PFN_MASK);
    if e.special() {
        for i in 0..HPAGE_NR as usize {
            pgtable::store(phys, table, i, Pte::new(k.zero_pfn, bits.0));
        }
    } else {
        let f = Folio::from_head(phys, e.pfn());
        let exclusive = f.anon_exclusive(0);
        f.ref_add(HPAGE_NR as i32 - 1);
        for i in 0..HPAGE_NR {
            pgtable::store(phys, table, i as usize, Pte::new(f.pfn + i, bits.0));
        }
        rmap::folio_split_anon_pmd(k, f, mm.rmap, exclusive);
    }
    pmd.store(phys, Pte::new(table, Pte::PRESENT | Pte::RW | Pte::USER | Pte::ACCESSED));
}

/// `__split_huge_pmd_locked` for a shmem folio: the PMD is cleared and
/// flushed and its mapping, reference and RSS dropped; the pages refault.
fn unmap_file_pmd(k: &Kernel, mm: &Mm, pmd: PmdSlot, haddr: u64, e: Pte) {
    let f = Folio::from_head(&k.phys, e.pfn());
    pmd.store(&k.phys, Pte::NONE);
    mm.tlb.flush_range(&k.stats, haddr, haddr + PMD_SIZE);
    Stats::inc(&k.stats.thp_split_pmd);
    rmap::folio_remove_rmap(k, f, 0, HPAGE_NR, Level::Pmd, mm.rmap);
    mm.add_rss(f, -(HPAGE_NR as i64));
    k.folio_put_refs(f, 1);
}

/// `copy_huge_pmd`: the child gets a read-only, old copy of the PMD and a
/// deposited table of its own; the parent's PMD is write-protected.
/// Returns false, changing nothing, when the THP may be pinned: the caller
/// splits the parent's PMD and copies PTEs instead (-EAGAIN in Linux); or
/// when the entry is no longer huge under the lock.
pub(crate) fn copy_huge_pmd(k: &Kernel, dst: &Mm, src: &Mm, dpmd: PmdSlot, spmd: PmdSlot, addr: u64) -> Result<bool> {
    let phys = &k.phys;
    let e = spmd.load(phys);
    if !e.huge() {
        // Split since the caller looked: it copies the PTEs.
        return Ok(false);
    }
    if !e.special() && !Folio::from_head(phys, e.pfn()).test_anon() {
        // A file PMD is not copied: the child refaults it.
        return Ok(true);
    }
    let table = k.alloc_table()?;
    let dl = pte_lockptr(phys, dpmd.table).lock();
    let sl = (dpmd.table != spmd.table).then(|| pte_lockptr(phys, spmd.table).lock());
    let e = spmd.load(phys);
    if !e.huge() {
        // Split meanwhile (an rmap walk's split): the caller copies PTEs.
        drop((sl, dl));
        k.free_table(table);
        return Ok(false);
    }
    if !e.special() {
        let f = Folio::from_head(phys, e.pfn());
        f.ref_add(1);
        let pinned = src.has_pinned.load(Relaxed);
        if rmap::folio_try_dup_anon_rmap(k, f, 0, HPAGE_NR, Level::Pmd, dst.rmap, pinned).is_err() {
            f.put_refs(1);
            drop((sl, dl));
            k.free_table(table);
            return Ok(false);
        }
        dst.add_anon_rss(HPAGE_NR as i64);
        spmd.store(phys, e.without(Pte::RW));
    }
    deposit(dst, addr & !(PMD_SIZE - 1), table);
    dpmd.store(phys, e.without(Pte::RW | Pte::ACCESSED | Pte::UFFD_WP));
    Ok(true)
}

/// `zap_huge_pmd`: clears a whole huge PMD, frees its deposited table and
/// gathers the PMD's single folio reference (`tlb_remove_page_size`).
/// Also clears a 1 GiB hugetlb page's PUD (`__unmap_hugepage_range`),
/// which has no deposit. Returns false, doing nothing, when the entry is
/// no longer huge under the lock (a split got there first): the caller
/// zaps the PTEs instead. In an `mlocked` VMA the folio is munlocked,
/// which moves the `mlock` batch at once (it is large).
pub(crate) fn zap_huge_pmd(k: &Kernel, mm: &Mm, tlb: &mut MmuGather, pmd: PmdSlot, haddr: u64, mlocked: bool) -> bool {
    let phys = &k.phys;
    let full = {
        let _pl = pte_lockptr(phys, pmd.table).lock();
        let e = pmd.load(phys);
        if !e.huge() {
            return false;
        }
        pmd.store(phys, Pte::NONE);
        let table = mm.deposits.lock().unwrap().remove(&haddr);
        if let Some(table) = table {
            tlb.remove_table(table, haddr);
        }
        if e.special() {
            tlb.remove_tlb_entries(haddr, HPAGE_NR);
            false
        } else {
            let f = Folio::from_head(phys, e.pfn());
            let nr = f.nr_pages();
            tlb.remove_tlb_entries(haddr, nr);
            rmap::folio_remove_rmap(k, f, 0, nr, Level::Pmd, mm.rmap);
            k.munlock_vma_folio(f, mlocked, true);
            mm.add_rss(f, -(nr as i64));
            Stats::add(&k.stats.zap_ptes, 1);
            Stats::inc(&k.stats.zap_batches);
            tlb.remove_folio_pages(f.pfn, 1, false)
        }
    };
    if full {
        tlb.flush_mmu();
    }
    true
}

/// `move_huge_pmd` (mremap): moves a whole huge PMD and its deposit.
/// Returns false, moving nothing, when the entry is no longer huge under
/// the lock (split meanwhile): the caller moves the PTEs.
pub(crate) fn move_huge_pmd(
    k: &Kernel,
    mm: &Mm,
    spmd: PmdSlot,
    dpmd: PmdSlot,
    src: u64,
    dst: u64,
    moved: &dyn Fn(Pte) -> Pte,
) -> bool {
    let phys = &k.phys;
    let _sl = pte_lockptr(phys, spmd.table).lock();
    let _dl = (dpmd.table != spmd.table).then(|| pte_lockptr(phys, dpmd.table).lock());
    let e = spmd.load(phys);
    if !e.huge() {
        return false;
    }
    debug_assert!(dpmd.load(phys).is_none());
    spmd.store(phys, Pte::NONE);
    dpmd.store(phys, moved(e));
    let table = mm.deposits.lock().unwrap().remove(&src);
    if let Some(t) = table {
        deposit(mm, dst, t);
    }
    true
}

/// `change_huge_pmd` (mprotect of a whole huge PMD, or of a 1 GiB hugetlb
/// page's PUD). Returns whether it changed; `None` when the entry is no
/// longer huge under the lock (a split got there first: the caller changes
/// the PTEs instead).
pub(crate) fn change_huge_pmd(k: &Kernel, pmd: PmdSlot, vma: &Vma) -> Option<bool> {
    let phys = &k.phys;
    let _pl = pte_lockptr(phys, pmd.table).lock();
    let e = pmd.load(phys);
    if !e.huge() {
        return None;
    }
    let anon = !e.special() && phys.page(e.pfn()).test(pg::ANON);
    // A shared mapping's PMD becomes writable whole, as its PTEs would; a
    // private THP's only from 6.2; a private hugetlb page's never
    // (`hugetlb_change_protection` applies the VMA's read-only private
    // protection, and the next write reuses the page in `hugetlb_wp`).
    let private_ok = !vma.is_hugetlb() && k.config.release().mprotect_writes_clean_private();
    let can_write = super::change_protection::can_change_writable(k, vma, e, || {
        anon && phys.page(e.pfn()).test(pg::ANON_EXCLUSIVE)
    }) && (vma.shared() || private_ok);
    let n = e.modify_prot(vma.readable(), vma.writable() && can_write);
    pmd.store(phys, n);
    Some(n != e)
}
