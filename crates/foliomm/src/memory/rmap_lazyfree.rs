//! The `MADV_FREE` check of mm/rmap.c `try_to_unmap_one` and mm/huge_memory.c
//! `__discard_anon_folio_pmd_locked`: reclaim drops a lazily freed folio
//! where it is mapped, unless something wrote to it since (an entry or the
//! folio dirty: it is swap-backed again) or holds a reference beyond its
//! mappings and the reclaimer's (it stays lazily freed, for a later try).
//! From 6.16 the PTEs of a large folio in one VMA and one page table go as
//! one batch (`folio_unmap_pte_batch`), the rmap and the reference in one
//! call: seed 000's "batch rmap in unmap", which Linux did for lazily freed
//! folios first. From 6.12 a PMD-mapped one goes whole, its PMD never split
//! (`unmap_huge_pmd_locked`).

use crate::arch::{pte_index, Pfn, Pte, PAGE_SIZE, PMD_SIZE};
use crate::folio::Folio;
use crate::kernel::Kernel;
use crate::mapcount::Level;
use crate::mm_types::Mm;
use crate::pgtable::{folio_pte_batch, load, pte_lock_checked, pte_lockptr, store, walk_pmd, PmdSlot};
use crate::phys::pg;
use crate::rmap;

/// Whether a lazily freed `f` may go now: its only references are its
/// mappings and the reclaimer's (`ref_count == 1 + map_count`).
fn unused(k: &Kernel, f: Folio) -> bool {
    f.refcount() as u64 == 1 + rmap::folio_mapcount(k, f)
}

/// The PTEs from `addr` (at most `max`) that map page `p` of the lazily
/// freed `f` on: one, or from 6.16 the run `folio_pte_batch` finds. They
/// are cleared and flushed, a dirty one dirtying the folio; then dropped
/// with their rmap, RSS and references if nothing dirtied the folio and
/// nothing else holds it, or put back. Returns whether the walk goes on
/// (false in an mlocked VMA, or once the folio is kept) and the entries
/// looked at.
pub(super) fn discard_ptes(
    k: &Kernel,
    mm: &Mm,
    (pmd, table): (PmdSlot, Pfn),
    addr: u64,
    (f, p): (Folio, u64),
    locked: bool,
    max: u64,
) -> (bool, u64) {
    let (phys, idx) = (&k.phys, pte_index(addr));
    let Some(_ptl) = pte_lock_checked(phys, pmd, table) else { return (true, 1) };
    let pte = load(phys, table, idx);
    if !pte.present() || pte.special() || pte.pfn() != f.pfn + p {
        return (true, 1);
    }
    if locked {
        return (false, 1);
    }
    let batches = f.is_large() && k.config.release().batches_lazyfree_unmap();
    let nr = if batches { folio_pte_batch(phys, f, table, idx, pte, max as usize, 0).0 } else { 1 };
    let old: Vec<Pte> = (idx..idx + nr).map(|i| load(phys, table, i)).collect();
    (idx..idx + nr).for_each(|i| store(phys, table, i, Pte::NONE));
    mm.tlb.flush_range(&k.stats, addr, addr + nr as u64 * PAGE_SIZE);
    if old.iter().any(|e| e.dirty()) {
        f.head().set(pg::DIRTY);
    }
    let dirty = f.head().test(pg::DIRTY);
    if dirty || !unused(k, f) {
        old.iter().enumerate().for_each(|(i, &e)| store(phys, table, idx + i, e));
        if dirty {
            f.head().set(pg::SWAPBACKED);
        }
        return (false, nr as u64);
    }
    mm.add_anon_rss(-(nr as i64));
    rmap::folio_remove_rmap(k, f, p, nr as u64, Level::Pte, mm.rmap);
    f.put_refs(nr as i32);
    (true, nr as u64)
}

/// `unmap_huge_pmd_locked` for the lazily freed THP `f` a huge PMD at
/// `addr` maps: dropped whole with its deposited table, or kept (dirty:
/// swap-backed again) with the PMD put back. Returns whether the walk goes on.
pub(super) fn discard_pmd(k: &Kernel, mm: &Mm, addr: u64, f: Folio) -> bool {
    let phys = &k.phys;
    let haddr = addr & !(PMD_SIZE - 1);
    let Some(pmd) = walk_pmd(phys, mm.pgd, haddr) else { return true };
    let _pl = pte_lockptr(phys, pmd.table).lock();
    let e = pmd.load(phys);
    if !e.huge() || e.pfn() != f.pfn {
        return true;
    }
    pmd.store(phys, Pte::NONE);
    mm.tlb.flush_range(&k.stats, haddr, haddr + PMD_SIZE);
    if e.dirty() {
        f.head().set(pg::DIRTY);
    }
    let dirty = f.head().test(pg::DIRTY);
    if dirty || !unused(k, f) {
        pmd.store(phys, e);
        if dirty {
            f.head().set(pg::SWAPBACKED);
        }
        return false;
    }
    rmap::folio_remove_rmap(k, f, 0, f.nr_pages(), Level::Pmd, mm.rmap);
    if let Some(table) = mm.deposits.lock().unwrap().remove(&haddr) {
        mm.tlb.tables.free(table, |t| k.free_table(t));
    }
    mm.add_anon_rss(-(f.nr_pages() as i64));
    f.put_refs(1);
    true
}
