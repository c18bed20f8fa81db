//! Reverse-mapping bookkeeping of anonymous and file folios (mm/rmap.c,
//! include/linux/rmap.h): every function here changes a folio's mapcounts for
//! a batch of PTEs or one PMD, exactly once per batch.
//!
//! Small folios count in the head page's `_mapcount`; large folios delegate to
//! the machine's [`crate::mapcount::MapcountDesign`]. An anon folio's
//! `folio->mapping` names its anon_vma ([`anon_vma`]), whose tree
//! ([`vma_record`]) an rmap walk follows. Every caller holds the PTL of the
//! table it changes. Each function tells the kernel's observer what changed
//! and adds what the design's update cost to the counters.

pub mod anon_vma;
pub mod ksm;
pub mod vma_record;

pub use anon_vma::{AnonVma, AnonVmaSlot};
pub use vma_record::{RmapTree, VmaRecord};

use crate::arch::PMD_ORDER;
use crate::folio::Folio;
use crate::kernel::{Kernel, Stats};
use crate::mapcount::{Cost, Level, MmId, Removed, RmapMm, SharedAnswer};
use crate::phys::pg;
use crate::sync::atomic::Ordering::Relaxed;
use crate::Errno;

/// `folio_add_new_anon_rmap(folio, vma, addr, RMAP_EXCLUSIVE)`: first mapping
/// of a freshly allocated anon folio, all pages by PTEs or the whole by a PMD,
/// under `anon_vma` at page index `index` (`__folio_set_anon`). Sets
/// `PageAnonExclusive` on every page (PTE) or the head (PMD). A caller
/// whose folio is on no LRU list (not of hugetlb, nor a swap-cache folio,
/// which joined one when a swap-in read it) adds it next
/// (`folio_add_lru_vma`), as Linux's callers do.
pub fn folio_add_new_anon_rmap(k: &Kernel, f: Folio, level: Level, mm: RmapMm, (anon_vma, index): (u64, u64)) {
    Stats::inc(&k.stats.rmap_add_new);
    note(k, f, mm.id, if level == Level::Pte { f.nr_pages() as i64 } else { 1 });
    f.head().set(pg::ANON | pg::SWAPBACKED);
    f.head().link.store(anon_vma, Relaxed);
    f.set_index(index);
    if f.is_large() {
        k.design.add_new(f, level, mm);
    } else {
        f.head().mapcount.store(0, Relaxed);
    }
    mod_mapped(k, f, f.nr_pages() as i64);
    match level {
        Level::Pte => (0..f.nr_pages()).for_each(|i| f.set_anon_exclusive(i, true)),
        Level::Pmd => f.set_anon_exclusive(0, true),
    }
}

/// `folio_add_anon_rmap_ptes`: adds `nr` PTE mappings of pages
/// `first..first+nr` of an already anon folio (used by PMD split).
pub fn folio_add_anon_rmap_ptes(k: &Kernel, f: Folio, first: u64, nr: u64, mm: RmapMm, exclusive: bool) {
    Stats::inc(&k.stats.rmap_add);
    note(k, f, mm.id, nr as i64);
    add_counts(k, f, first, nr, Level::Pte, mm);
    if exclusive {
        (first..first + nr).for_each(|i| f.set_anon_exclusive(i, true));
    }
}

/// The rmap side of `__split_huge_pmd_locked` for an anon folio that one
/// PMD of `mm` mapped and PTEs now map page by page, each AnonExclusive if
/// the PMD's was (`exclusive`). Linux 6.1 updates the counts itself
/// ([`crate::mapcount::MapcountDesign::split_pmd`]); later releases add the
/// PTE mappings (in one call from 6.8, page by page before) and remove the
/// PMD's.
pub fn folio_split_anon_pmd(k: &Kernel, f: Folio, mm: RmapMm, exclusive: bool) {
    let nr = f.nr_pages();
    if let Some(cost) = k.design.split_pmd(f) {
        note(k, f, mm.id, nr as i64 - 1);
        account(k, cost);
        if exclusive {
            (0..nr).for_each(|i| f.set_anon_exclusive(i, true));
        }
        return;
    }
    if k.design.batches_pmd_split() {
        folio_add_anon_rmap_ptes(k, f, 0, nr, mm, exclusive);
    } else {
        (0..nr).for_each(|i| folio_add_anon_rmap_ptes(k, f, i, 1, mm, exclusive));
    }
    folio_remove_rmap(k, f, 0, nr, Level::Pmd, mm);
}

/// `folio_add_anon_rmap_pmd`: adds a PMD mapping of an already anon folio
/// (migration's `remove_migration_pmd`), its head AnonExclusive if
/// `exclusive`.
pub fn folio_add_anon_rmap_pmd(k: &Kernel, f: Folio, mm: RmapMm, exclusive: bool) {
    Stats::inc(&k.stats.rmap_add);
    note(k, f, mm.id, 1);
    add_counts(k, f, 0, f.nr_pages(), Level::Pmd, mm);
    if exclusive {
        f.set_anon_exclusive(0, true);
    }
}

/// `folio_add_file_rmap_ptes` / `_pmd`, and `folio_dup_file_rmap_ptes` at
/// fork: adds `nr` PTE mappings of pages `first..first+nr` of a file
/// folio, or one PMD mapping, for `mm`. No exclusivity: file pages are
/// never AnonExclusive.
pub fn folio_add_file_rmap(k: &Kernel, f: Folio, first: u64, nr: u64, level: Level, mm: RmapMm) {
    Stats::inc(&k.stats.rmap_add);
    note(k, f, mm.id, if level == Level::Pte { nr as i64 } else { 1 });
    add_counts(k, f, first, nr, level, mm);
}

/// `folio_try_dup_anon_rmap_ptes` / `_pmd` (fork): clears
/// `PageAnonExclusive` and adds the mappings to the child's MM. Returns EBUSY,
/// changing nothing, when the parent has pinned pages (`MMF_HAS_PINNED`), the
/// folio may be pinned (`folio_maybe_dma_pinned`) and a page of the range is
/// exclusive: the caller must give the child a copy instead.
pub fn folio_try_dup_anon_rmap(
    k: &Kernel,
    f: Folio,
    first: u64,
    nr: u64,
    level: Level,
    child: RmapMm,
    parent_has_pinned: bool,
) -> Result<(), Errno> {
    let exclusive = match level {
        Level::Pte => (first..first + nr).any(|i| f.anon_exclusive(i)),
        Level::Pmd => f.anon_exclusive(0),
    };
    if parent_has_pinned && exclusive && f.maybe_dma_pinned() {
        return Err(Errno::EBUSY);
    }
    Stats::inc(&k.stats.rmap_dup);
    note(k, f, child.id, if level == Level::Pte { nr as i64 } else { 1 });
    match level {
        Level::Pte => (first..first + nr).for_each(|i| f.set_anon_exclusive(i, false)),
        Level::Pmd => f.set_anon_exclusive(0, false),
    }
    add_counts(k, f, first, nr, level, child);
    Ok(())
}

/// `folio_remove_rmap_ptes` / `folio_remove_rmap_pmd`.
pub fn folio_remove_rmap(k: &Kernel, f: Folio, first: u64, nr: u64, level: Level, mm: RmapMm) -> Removed {
    Stats::inc(&k.stats.rmap_remove);
    note(k, f, mm.id, -(if level == Level::Pte { nr as i64 } else { 1 }));
    if f.is_large() {
        let r = k.design.remove(f, first, nr, level, mm);
        account(k, r.cost);
        mod_mapped(k, f, -(r.unmapped_pages as i64));
        if r.deferred_split && f.test_anon() {
            deferred_split_folio(k, f);
        }
        return r;
    }
    let last = f.head().mapcount.fetch_sub(1, Relaxed) == 0;
    mod_mapped(k, f, -(last as i64));
    Removed { unmapped_pages: last as u64, ..Removed::default() }
}

fn add_counts(k: &Kernel, f: Folio, first: u64, nr: u64, level: Level, mm: RmapMm) {
    let newly = if f.is_large() {
        let added = k.design.add(f, first, nr, level, mm);
        account(k, added.cost);
        added.newly_mapped
    } else {
        (f.head().mapcount.fetch_add(1, Relaxed) == -1) as u64
    };
    mod_mapped(k, f, newly as i64);
}

/// `__folio_mod_stat`: `NR_ANON_MAPPED` or `NR_FILE_MAPPED` += `delta`
/// pages of `f`; hugetlb folios count in neither.
fn mod_mapped(k: &Kernel, f: Folio, delta: i64) {
    if !f.head().test(pg::HUGETLB) {
        k.stats.mapped.add(f.test_anon(), delta);
    }
}

/// `folio_mapcount`: page-table entries mapping any page of the folio.
pub fn folio_mapcount(k: &Kernel, f: Folio) -> u64 {
    if f.is_large() {
        k.design.mapcount(f)
    } else {
        (f.head().mapcount.load(Relaxed) + 1) as u64
    }
}

/// `folio_precise_page_mapcount`: entries mapping page `i`; `None` when the
/// design keeps no per-page counts.
pub fn page_mapcount(k: &Kernel, f: Folio, i: u64) -> Option<u64> {
    if f.is_large() {
        k.design.page_mapcount(f, i)
    } else {
        Some((f.head().mapcount.load(Relaxed) + 1) as u64)
    }
}

/// `folio_maybe_mapped_shared`; counts the answers a busy rmap-id reader
/// gave up on (`precision_reader_busy`).
pub fn folio_maybe_mapped_shared(k: &Kernel, f: Folio) -> bool {
    if f.is_large() {
        let answer = k.design.maybe_mapped_shared(f);
        if answer == SharedAnswer::Busy {
            Stats::inc(&k.stats.precision_reader_busy);
        }
        answer.maybe_shared()
    } else {
        folio_mapcount(k, f) > 1
    }
}

/// Whether page `i` of `f` is (maybe) mapped by more than one process, asked
/// as the release's policy paths ask it
/// ([`crate::release::KernelVersion::sharing_question`]); a design without
/// per-page mapcounts answers `page_mapcount` with its guess for the folio.
pub fn page_maybe_mapped_shared(k: &Kernel, f: Folio, i: u64) -> bool {
    use crate::release::SharingQuestion::*;
    match k.config.release().sharing_question() {
        MaybeMappedShared => folio_maybe_mapped_shared(k, f),
        LikelyMappedShared => folio_likely_mapped_shared(k, f, i),
        PageMapcount => page_mapcount(k, f, i).map_or_else(|| folio_likely_mapped_shared(k, f, i), |c| c > 1),
    }
}

/// The era's policy guess whether `f` (seen at page `i`) is mapped shared
/// (`folio_likely_mapped_shared` and its forerunners; see
/// [`crate::mapcount::MapcountDesign::likely_mapped_shared`]).
pub fn folio_likely_mapped_shared(k: &Kernel, f: Folio, i: u64) -> bool {
    if f.is_large() {
        k.design.likely_mapped_shared(f, i)
    } else {
        folio_mapcount(k, f) > 1
    }
}

/// `deferred_split_folio(folio, partially_mapped = true)`: marks an anon
/// folio partially mapped and queues it for deferred split once, counting
/// it (`thp_deferred_split_page` for PMD size, `split_deferred` per
/// order). The shrinker splits it under memory pressure
/// ([`crate::memory::split::deferred_split_scan`]).
fn deferred_split_folio(k: &Kernel, f: Folio) {
    let second = f.page(1);
    if second.flags.fetch_or(pg::PARTIALLY_MAPPED, Relaxed) & pg::PARTIALLY_MAPPED != 0 {
        return;
    }
    k.deferred_split_queue(f);
    if f.order() == PMD_ORDER {
        Stats::inc(&k.stats.thp_deferred_split_page);
    }
    Stats::inc(&k.stats.split_deferred[f.order() as usize]);
}

/// Tells the observer of `delta` mappings of `f` by `mm`; not for hugetlb
/// folios, whose mappings belong to no MM in particular (a shared PMD table
/// maps them for every MM that shares it).
fn note(k: &Kernel, f: Folio, mm: MmId, delta: i64) {
    if !f.head().test(pg::HUGETLB) {
        k.observe(|o| o.mapped(f.pfn, mm, delta));
    }
}

/// Adds one design operation's cost (and the spins it waited) to the
/// counters, and its locked RMWs to a simulated CPU's clock.
fn account(k: &Kernel, c: Cost) {
    if c.rmw != 0 {
        crate::sync::sim::work(crate::sync::sim::Work::Atomics(c.rmw));
    }
    for (counter, n) in [
        (&k.stats.rmap_atomic_rmw, c.rmw),
        (&k.stats.rmap_locks, c.locks),
        (&k.stats.rmap_cache_lines, c.lines),
        (&k.stats.rmap_lock_spins, c.spins),
        (&k.stats.rmap_seq_lost, c.lost),
    ] {
        if n != 0 {
            Stats::add(counter, n);
        }
    }
}
