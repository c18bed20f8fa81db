//! Page-fault handling for private anonymous memory (mm/memory.c
//! `handle_mm_fault` → `__handle_mm_fault` → `handle_pte_fault`,
//! `do_anonymous_page`, `alloc_anon_folio`, `do_wp_page`,
//! `wp_can_reuse_anon_folio`, `wp_page_copy`). The caller holds the
//! mmap_lock for read and has checked the access against the VMA.
//!
//! Differs from Linux: no per-VMA lock yet, no LRU, swap, KSM, userfaultfd or
//! memcg; a folio lock that is contended makes reuse fail instead of waiting.

use std::sync::atomic::Ordering::*;

use crate::folio::Folio;
use crate::huge_memory::{self, Huge};
use crate::machine::Machine;
use crate::mapcount::Level;
use crate::memory::pte_range_none;
use crate::mm::{vm, Mm, Vma};
use crate::pgtable::{alloc_pmd, alloc_pte_table, load, pte_index, store, table_lock, Pte, PMD_SIZE};
use crate::phys::{Pfn, PAGE_SIZE, PMD_ORDER};
use crate::rmap;
use crate::stats::Stats;
use crate::Result;

/// `anon_vma_prepare`: gives the VMA an anon_vma before its first anon folio.
pub(crate) fn anon_vma_prepare(m: &Machine, vma: &Vma) {
    if vma.anon_vma() == 0 {
        let _ = vma.anon_vma.compare_exchange(0, m.new_anon_vma(), AcqRel, Acquire);
    }
}

fn thp_orders(m: &Machine, vma: &Vma) -> u32 {
    m.thp.allowable_orders(vma.flags & vm::HUGEPAGE != 0, vma.flags & vm::NOHUGEPAGE != 0)
}

/// What a fault asks for (`FAULT_FLAG_WRITE`, `FAULT_FLAG_UNSHARE`, neither).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    Read,
    Write,
    /// Make an anon page exclusive to this MM without writing it (GUP R/O
    /// pins): the COW paths run, but the entry stays read-only.
    Unshare,
}

/// `handle_mm_fault` for a read or write of `addr` in `vma`. Returns ENOMEM
/// (`VM_FAULT_OOM`) when no order-0 page or page table can be allocated.
pub fn handle_mm_fault(m: &Machine, mm: &Mm, vma: &Vma, addr: u64, write: bool) -> Result<()> {
    handle_fault(m, mm, vma, addr, if write { FaultKind::Write } else { FaultKind::Read })
}

/// `handle_mm_fault` with the fault's kind spelled out.
pub fn handle_fault(m: &Machine, mm: &Mm, vma: &Vma, addr: u64, kind: FaultKind) -> Result<()> {
    Stats::inc(&m.stats.pgfault);
    let r = fault(m, mm, vma, addr, kind);
    if r.is_err() {
        Stats::inc(&m.stats.oom);
    }
    r
}

fn fault(m: &Machine, mm: &Mm, vma: &Vma, addr: u64, kind: FaultKind) -> Result<()> {
    let phys = &m.phys;
    let write = kind == FaultKind::Write;
    let unshare = kind == FaultKind::Unshare;
    let pmd = alloc_pmd(m, mm.pgd, addr, &mm.page_table_lock)?;
    loop {
        let e = pmd.load(phys);
        if e.is_none() {
            let haddr = addr & !(PMD_SIZE - 1);
            let fits = haddr >= vma.start && haddr + PMD_SIZE <= vma.end;
            if fits
                && thp_orders(m, vma) & (1 << PMD_ORDER) != 0
                && huge_memory::do_huge_pmd_anonymous_page(m, mm, vma, pmd, addr, write)? == Huge::Done
            {
                return Ok(());
            }
        } else if e.huge() {
            if (write || unshare) && !e.write() {
                if huge_memory::do_huge_pmd_wp_page(m, mm, vma, pmd, addr, e, unshare)? == Huge::Done {
                    return Ok(());
                }
                continue;
            }
            touch(m, pmd.table, pmd.idx, e, write);
            return Ok(());
        }
        let Some(table) = alloc_pte_table(m, pmd)? else {
            continue;
        };
        return handle_pte_fault(m, mm, vma, table, addr, kind);
    }
}

/// Sets accessed (and dirty for a write) on an entry that already allows the
/// access, as the MMU would (`huge_pmd_set_accessed`, the `pte_mkyoung` tail
/// of `handle_pte_fault`).
fn touch(m: &Machine, table: Pfn, idx: usize, orig: Pte, write: bool) {
    let _ptl = table_lock(&m.phys, table);
    if load(&m.phys, table, idx) == orig {
        let bits = Pte::ACCESSED | if write { Pte::DIRTY } else { 0 };
        store(&m.phys, table, idx, orig.with(bits));
    }
}

fn handle_pte_fault(m: &Machine, mm: &Mm, vma: &Vma, table: Pfn, addr: u64, kind: FaultKind) -> Result<()> {
    let pte = load(&m.phys, table, pte_index(addr));
    let write = kind == FaultKind::Write;
    if pte.is_none() {
        do_anonymous_page(m, mm, vma, table, addr, write)
    } else if kind != FaultKind::Read && !pte.write() {
        do_wp_page(m, mm, vma, table, addr, pte, kind == FaultKind::Unshare)
    } else {
        touch(m, table, pte_index(addr), pte, write);
        Ok(())
    }
}

/// `do_anonymous_page`: a read maps the shared zero page; a write allocates
/// the largest allowed folio (`alloc_anon_folio`), zeroes it and maps all its
/// pages with one batched rmap call, provided every PTE of the range is still
/// none.
fn do_anonymous_page(m: &Machine, mm: &Mm, vma: &Vma, table: Pfn, addr: u64, write: bool) -> Result<()> {
    let phys = &m.phys;
    if !write {
        let _ptl = table_lock(phys, table);
        if load(phys, table, pte_index(addr)).is_none() {
            store(
                phys,
                table,
                pte_index(addr),
                Pte::new(m.zero_pfn, Pte::PRESENT | Pte::USER | Pte::SPECIAL | Pte::ACCESSED),
            );
            Stats::inc(&m.stats.zero_page_map);
        }
        return Ok(());
    }
    anon_vma_prepare(m, vma);
    let f = alloc_anon_folio(m, vma, table, addr)?;
    let nr = f.nr_pages();
    let base = addr & !(nr * PAGE_SIZE - 1);
    let _ptl = table_lock(phys, table);
    if !pte_range_none(phys, table, pte_index(base), nr as usize) {
        drop(_ptl);
        m.folio_put_refs(f, 1);
        return Ok(());
    }
    f.ref_add(nr as i32 - 1);
    rmap::folio_add_new_anon_rmap(m, f, Level::Pte, mm.id, vma.anon_vma());
    for i in 0..nr {
        let e = Pte::new(f.pfn + i, Pte::PRESENT | Pte::USER | Pte::ACCESSED | Pte::DIRTY | Pte::RW);
        store(phys, table, pte_index(base) + i as usize, e);
    }
    mm.rss_anon.fetch_add(nr as i64, Relaxed);
    Stats::inc(&m.stats.anon_fault_alloc[f.order() as usize]);
    Ok(())
}

/// `alloc_anon_folio`: from the highest allowed order below PMD order down,
/// the first whose naturally aligned range lies inside the VMA, has only none
/// PTEs and can be allocated; else order 0. The folio comes zeroed.
fn alloc_anon_folio<'m>(m: &'m Machine, vma: &Vma, table: Pfn, addr: u64) -> Result<Folio<'m>> {
    let orders = thp_orders(m, vma) & ((1 << PMD_ORDER) - 1);
    for order in (1..PMD_ORDER).rev().filter(|o| orders & (1 << o) != 0) {
        let size = PAGE_SIZE << order;
        let base = addr & !(size - 1);
        if base < vma.start || base + size > vma.end || !pte_range_none(&m.phys, table, pte_index(base), 1 << order) {
            continue;
        }
        match m.alloc_folio_zeroed(order) {
            Ok(f) => return Ok(f),
            Err(_) => Stats::inc(&m.stats.anon_fault_fallback[order as usize]),
        }
    }
    m.alloc_folio_zeroed(0)
}

/// `do_wp_page` for a private anonymous mapping: reuse the page if it is
/// AnonExclusive, or if `wp_can_reuse_anon_folio` says so (small folio: sole
/// reference; large folio: the design's answer); otherwise copy it. Reuse
/// makes only the faulting PTE writable and marks only that page exclusive;
/// with `unshare` (FAULT_FLAG_UNSHARE) the PTE stays read-only.
fn do_wp_page(m: &Machine, mm: &Mm, vma: &Vma, table: Pfn, addr: u64, orig: Pte, unshare: bool) -> Result<()> {
    let phys = &m.phys;
    if orig.special() {
        return wp_page_copy(m, mm, vma, table, addr, orig, None, unshare);
    }
    let idx = pte_index(addr);
    let f = {
        let _ptl = table_lock(phys, table);
        if load(phys, table, idx) != orig {
            return Ok(());
        }
        let f = Folio::containing(phys, orig.pfn());
        let i = orig.pfn() - f.pfn;
        let reuse = f.anon_exclusive(i)
            || if f.is_large() {
                {
                    let reuse =
                        m.config.debug.reuse_shared || (!m.config.debug.no_large_reuse && m.design.can_reuse(f, mm.id));
                    crate::precision::judge_cow(m, f, mm.id, reuse);
                    reuse
                }
            } else {
                f.trylock().is_some() && f.refcount() == 1
            };
        if reuse {
            f.set_anon_exclusive(i, true);
            if !unshare {
                store(phys, table, idx, orig.with(Pte::ACCESSED | Pte::DIRTY | Pte::RW));
                Stats::inc(&m.stats.pgreuse);
            }
            return Ok(());
        }
        f.ref_add(1);
        f
    };
    wp_page_copy(m, mm, vma, table, addr, orig, Some(f), unshare)
}

/// `wp_page_copy`: copies the page (or zero-fills for the zero page) into a
/// new order-0 folio and replaces the PTE; the old mapping's rmap is removed
/// after the PTE is cleared and flushed, and the old folio's references (the
/// mapping's and the one taken by the caller) are dropped last. With
/// `unshare` the new page is mapped read-only and clean.
#[allow(clippy::too_many_arguments)]
fn wp_page_copy(
    m: &Machine,
    mm: &Mm,
    vma: &Vma,
    table: Pfn,
    addr: u64,
    orig: Pte,
    old: Option<Folio>,
    unshare: bool,
) -> Result<()> {
    let phys = &m.phys;
    anon_vma_prepare(m, vma);
    let new = match old {
        Some(_) => m.alloc_folio(0),
        None => m.alloc_folio_zeroed(0),
    };
    let new = match new {
        Ok(f) => f,
        Err(e) => {
            if let Some(old) = old {
                m.folio_put_refs(old, 1);
            }
            return Err(e);
        }
    };
    if old.is_some() {
        phys.copy_frame(new.pfn, orig.pfn());
    }
    let idx = pte_index(addr);
    let ptl = table_lock(phys, table);
    if load(phys, table, idx) != orig {
        drop(ptl);
        m.folio_put_refs(new, 1);
        if let Some(old) = old {
            m.folio_put_refs(old, 1);
        }
        return Ok(());
    }
    // ptep_clear_flush(): no CPU may keep writing the old page.
    store(phys, table, idx, Pte::NONE);
    let page = addr & !(PAGE_SIZE - 1);
    mm.tlb.flush_range(&m.stats, page, page + PAGE_SIZE);
    rmap::folio_add_new_anon_rmap(m, new, Level::Pte, mm.id, vma.anon_vma());
    let writable = if unshare { 0 } else { Pte::DIRTY | Pte::RW };
    store(phys, table, idx, Pte::new(new.pfn, Pte::PRESENT | Pte::USER | Pte::ACCESSED | writable));
    match old {
        Some(old) => {
            rmap::folio_remove_rmap(m, old, orig.pfn() - old.pfn, 1, Level::Pte, mm.id);
        }
        None => {
            mm.rss_anon.fetch_add(1, Relaxed);
        }
    }
    drop(ptl);
    if let Some(old) = old {
        m.folio_put_refs(old, 2);
    }
    Stats::inc(&m.stats.cow_copy);
    Ok(())
}
