//! Every mapping of an anon folio, held still: what `unmap_folio` (split)
//! and `try_to_migrate` (migration) reach through the rmap walk.
//!
//! Differs from Linux: instead of replacing each mapping with a migration
//! entry and restoring it afterwards (`remove_migration_ptes`), foliomm
//! holds the lock of every page table that maps the folio, taken with
//! trylock in frame order (so two walkers cannot deadlock; a busy one
//! gives EAGAIN, as a failed `folio_ref_freeze` does), while the caller
//! changes the folio under them. A fault on such a page waits on the
//! table's lock where Linux's waits on the migration entry
//! (`migration_entry_wait`); the outcome is the same.

use super::huge_memory::split_huge_pmd;
use crate::arch::{pte_index, Pfn, PAGE_SIZE, PMD_SIZE, PUD_ORDER, PUD_SIZE};
use crate::folio::Folio;
use crate::kernel::Kernel;
use crate::mapcount::Level;
use crate::mm_types::{vm, Mm, MmList};
use crate::pgtable::{load, pte_lockptr, walk_pmd, walk_pud, PmdSlot};
use crate::rmap::VmaRecord;
use crate::sync::{Arc, BitSpinLock};
use crate::{Errno, Result};

/// One entry mapping the folio: the MM, the table holding the entry and
/// its index there, its address, the folio page it maps (the first, for a
/// PMD), its level, and whether the VMA is mlocked.
pub struct Mapping<'m> {
    pub mm: &'m Mm,
    pub table: Pfn,
    pub idx: usize,
    pub addr: u64,
    pub page: u64,
    pub level: Level,
    pub locked: bool,
}

/// An MM, the address range of it that may map the folio, and whether the
/// VMA there is mlocked.
type Span = (Arc<Mm>, u64, u64, bool);

/// Finds every mapping of the locked folio `f` through its anon_vma
/// (`rmap_walk_anon`) or, for a page-cache folio, its file's `i_mmap`
/// (`rmap_walk_file`) and calls `act` with them while every table holding
/// one is locked. With `split_pmds` a huge PMD mapping the folio is split
/// first (`TTU_SPLIT_HUGE_PMD`) and only PTEs are passed; without, a huge
/// PMD (a 1 GiB hugetlb folio's PUD) is passed as one mapping at
/// [`Level::Pmd`]. EBUSY if the anon_vma
/// or the file is gone; EAGAIN if a table's lock is busy or a table
/// changed meanwhile.
pub fn with_mappings<T>(
    k: &Kernel,
    mmlist: &MmList,
    f: Folio,
    split_pmds: bool,
    act: impl FnOnce(&[Mapping]) -> Result<T>,
) -> Result<T> {
    let link = f.head().link.load(crate::sync::atomic::Ordering::Relaxed);
    let (av, inode);
    let span =
        |r: &VmaRecord, (start, end): (u64, u64)| Some((mmlist.get(r.mm)?, start, end, r.flags & vm::LOCKED != 0));
    let (_tree, spans): (_, Vec<Span>) = if f.test_ksm() {
        // rmap_walk_ksm(): each rmap item's page in the VMAs spanning it.
        let ranges = mmlist.ksm.stable.walk_ranges(link);
        (None, ranges.iter().filter_map(|(r, start, end)| span(r, (*start, *end))).collect())
    } else {
        let tree = if f.test_anon() {
            av = mmlist.anon_vma(link).ok_or(Errno::EBUSY)?;
            av.tree.read()
        } else {
            inode = mmlist.inode(link).ok_or(Errno::EBUSY)?;
            inode.i_mmap.read()
        };
        let (first, last) = (f.index(), f.index() + f.nr_pages());
        let spans = tree.iter().filter_map(|r| span(r, r.addresses(first, last)?)).collect();
        (Some(tree), spans)
    };
    let _sections: Vec<_> = spans.iter().map(|(mm, ..)| mm.pt_read()).collect();
    // The slot a huge entry mapping the folio takes: a PMD slot, or a PUD
    // slot for a 1 GiB hugetlb folio (which no PTE table ever maps).
    let gigantic = f.order() == PUD_ORDER;
    let unit = if gigantic { PUD_SIZE } else { PMD_SIZE };
    let pmd_ranges = move |start: u64, end: u64| (start & !(unit - 1)..end).step_by(unit as usize);
    let huge_slot = |mm: &Mm, a: u64| match gigantic {
        true => walk_pud(&k.phys, mm.pgd, a).map(|(table, idx)| PmdSlot { table, idx }),
        false => walk_pmd(&k.phys, mm.pgd, a),
    };
    let huge_here = |mm: &Mm, a: u64| {
        let e = huge_slot(mm, a).map(|slot| slot.load(&k.phys));
        e.is_some_and(|e| e.huge() && e.pfn() == f.pfn)
    };
    if split_pmds {
        for (mm, start, end, _) in &spans {
            for a in pmd_ranges(*start, *end).map(|a| a.max(*start)).filter(|&a| huge_here(mm, a)) {
                split_huge_pmd(k, mm, a);
            }
        }
    }
    // The tables, each locked once, in frame order: a PTE table, or the
    // PMD table holding a huge PMD (its lock is the PMD lock).
    let mut tables: Vec<(Pfn, usize, u64, u64, bool)> = Vec::new();
    for (i, (mm, start, end, _)) in spans.iter().enumerate() {
        for a in pmd_ranges(*start, *end) {
            let from = a.max(*start);
            let Some(pmd) = huge_slot(mm, from) else { continue };
            let e = pmd.load(&k.phys);
            if huge_here(mm, from) && !split_pmds {
                tables.push((pmd.table, i, from, pmd.idx as u64, true));
            } else if !e.is_none() && !e.huge() && !gigantic {
                tables.push((e.pfn(), i, from, (a + PMD_SIZE).min(*end), false));
            }
        }
    }
    tables.sort_unstable();
    let mut ptls: Vec<BitSpinLock> = Vec::new();
    let mut maps = Vec::new();
    let mut last = None;
    for &(table, i, from, to_or_idx, huge) in &tables {
        let (mm, _, _, locked) = &spans[i];
        let still = huge_slot(mm, from).is_some_and(|pmd| {
            if huge {
                pmd.table == table && huge_here(mm, from)
            } else {
                pmd.load(&k.phys).pfn() == table
            }
        });
        if last != Some(table) {
            match pte_lockptr(&k.phys, table).try_lock().filter(|_| still) {
                Some(ptl) => ptls.push(ptl),
                None => return Err(Errno::EAGAIN),
            }
            last = Some(table);
        } else if !still {
            return Err(Errno::EAGAIN);
        }
        if huge {
            let (idx, level) = (to_or_idx as usize, Level::Pmd);
            maps.push(Mapping { mm, table, idx, addr: from, page: 0, level, locked: *locked });
        } else {
            maps.extend(table_mappings(k, mm, table, f, (from, to_or_idx), *locked));
        }
    }
    // Two VMAs may overlap a table's range while one is being split.
    maps.sort_unstable_by_key(|m| (m.table, m.idx));
    maps.dedup_by_key(|m| (m.table, m.idx));
    act(&maps)
}

/// The PTEs of `table` (of `mm`) in `[from, to)`, inside the range one PMD
/// maps, that map pages of `f`.
fn table_mappings<'m>(
    k: &Kernel,
    mm: &'m Mm,
    table: Pfn,
    f: Folio,
    (from, to): (u64, u64),
    locked: bool,
) -> Vec<Mapping<'m>> {
    (from..to)
        .step_by(PAGE_SIZE as usize)
        .filter_map(|addr| {
            let idx = pte_index(addr);
            let pte = load(&k.phys, table, idx);
            let ours = pte.present() && !pte.special() && (f.pfn..f.pfn + f.nr_pages()).contains(&pte.pfn());
            let page = pte.pfn().wrapping_sub(f.pfn);
            ours.then_some(Mapping { mm, table, idx, addr, page, level: Level::Pte, locked })
        })
        .collect()
}

/// `try_to_unmap` of the locked page-cache folio `f`: every PTE mapping it
/// (a huge PMD split first) cleared atomically (a dirty bit a CPU sets
/// meanwhile is not lost) and flushed, its rmap, reference and RSS
/// dropped; returns whether an entry was dirty (the folio's bytes are
/// newer than any copy). Unless `ignore_mlock` (`TTU_IGNORE_MLOCK`), a
/// mapping in an mlocked VMA stops it before anything is unmapped
/// (EAGAIN). Errors as [`with_mappings`].
pub fn unmap_file_folio(k: &Kernel, mmlist: &MmList, f: Folio, ignore_mlock: bool) -> Result<bool> {
    with_mappings(k, mmlist, f, true, |maps| {
        if !ignore_mlock && maps.iter().any(|m| m.locked) {
            return Err(Errno::EAGAIN);
        }
        let mut dirty = false;
        for m in maps {
            dirty |= crate::pgtable::take(&k.phys, m.table, m.idx).dirty();
            crate::rmap::folio_remove_rmap(k, f, m.page, 1, Level::Pte, m.mm.rmap);
            m.mm.add_rss(f, -1);
            m.mm.tlb.flush_range(&k.stats, m.addr, m.addr + PAGE_SIZE);
            f.put_refs(1);
        }
        Ok(dirty)
    })
}
