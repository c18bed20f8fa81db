//! Splitting a mapped anon or shmem large folio (mm/huge_memory.c
//! `split_folio_to_order` → `__folio_split`: `unmap_folio`,
//! `__split_unmapped_folio`, `remap_page`).
//!
//! An anon folio's mappings are restored after the split; a shmem
//! folio's are only removed (`unmap_folio` unmaps a file folio, and
//! `remap_page` leaves it unmapped): its pages are faulted in again.
//!
//! Differs from Linux: instead of replacing an anon folio's mappings with
//! migration entries and restoring them afterwards, foliomm holds every
//! page table that maps the folio locked ([`super::folio_mappings`]) while
//! only the folio's metadata changes: its mappings are removed from the
//! large folio and added back to each new folio, pages keeping their
//! AnonExclusive flag. A folio in the
//! swap cache is not split; a shmem folio's cache entries name the same
//! frames after the split, so they need no change (Linux's
//! `xas_split`), and no page lies beyond `i_size` to drop.

use super::folio_mappings::{with_mappings, Mapping};
use crate::arch::{Pfn, Pte, PAGE_SIZE};
use crate::folio::Folio;
use crate::kernel::{Kernel, Stats};
use crate::mapcount::Level;
use crate::mm_types::MmList;
use crate::pgtable::{load, store, take};
use crate::rmap;
use crate::sync::atomic::Ordering::{AcqRel, Acquire};
use crate::{Errno, Result};

/// `split_folio_to_order(folio, new_order)` for an anon or shmem large
/// folio, mapped anywhere: every mapping is found through the rmap walk (a
/// huge PMD split first, as `unmap_folio` asks with `TTU_SPLIT_HUGE_PMD`: a
/// shmem PMD is only cleared, to be refaulted by PTEs; a shmem folio's
/// PTEs are cleared too), the
/// tables holding them locked, and the folio split into folios of
/// `new_order` if nothing but its mappings, the page cache and the
/// caller's `held` references holds it; those stay on the first piece. With `list` (reclaim
/// splitting an isolated folio, `split_folio_to_list`), every other piece
/// still mapped, or in the page cache, goes there with a reference of its
/// own instead of onto the LRU. EINVAL for a small folio, one neither anon nor in a shmem page
/// cache (hugetlb), an order not below the folio's, order 1 of an anon
/// folio (`uniform_split_supported`) or one below the design's smallest
/// ([`crate::mapcount::MapcountDesign::min_large_order`]), or a folio in
/// the swap cache; EBUSY
/// if its anon_vma or file is gone; EAGAIN if it is locked, held by more than its
/// mappings (checked before a PMD is split, as `can_split_folio` is), or a
/// table's lock is busy.
pub fn split_folio_to_order<'k>(
    k: &'k Kernel,
    mmlist: &MmList,
    f: Folio<'k>,
    new_order: u32,
    held: i32,
    list: Option<&mut Vec<Folio<'k>>>,
) -> Result<()> {
    split_mapped(k, mmlist, f, new_order, None, held, list)
}

/// `folio_split(folio, new_order, page)` (6.15 on): as
/// [`split_folio_to_order`], but non-uniform: only page `at` of `f` ends
/// in a folio of `new_order`; the folio is halved around it, each half
/// without it a folio of its own (`__split_unmapped_folio` with
/// `uniform_split == false`), so fewer folios come out. The same checks
/// (`non_uniform_split_supported`: no order-1 anon folio, none in the swap
/// cache) and errors.
pub fn folio_split(k: &Kernel, mmlist: &MmList, f: Folio, new_order: u32, at: u64, held: i32) -> Result<()> {
    split_mapped(k, mmlist, f, new_order, Some(at), held, None)
}

/// `__folio_split`: the split of a mapped folio, uniform or around `at`.
fn split_mapped<'k>(
    k: &'k Kernel,
    mmlist: &MmList,
    f: Folio<'k>,
    new_order: u32,
    at: Option<u64>,
    held: i32,
    list: Option<&mut Vec<Folio<'k>>>,
) -> Result<()> {
    let in_cache = k.folio_swap(f).is_some();
    let hugetlb = f.head().test(crate::phys::pg::HUGETLB);
    let file = crate::shmem::in_page_cache(f) && !hugetlb;
    let order_1 = new_order == 1 && !file;
    let too_small = new_order != 0 && new_order < k.design.min_large_order();
    let anon = f.test_anon() && !hugetlb;
    if !f.is_large() || !(anon || file) || new_order >= f.order() || order_1 || too_small || in_cache {
        return Err(Errno::EINVAL);
    }
    // The page cache's references are held too (`folio_expected_ref_count`).
    let held = held + if file { crate::shmem::cache_refs(f) } else { 0 };
    let lock = f.trylock().ok_or(Errno::EAGAIN)?;
    if f.refcount() as u64 != rmap::folio_mapcount(k, f) + held as u64 {
        return Err(Errno::EAGAIN);
    }
    with_mappings(k, mmlist, f, true, |maps| {
        if can_split(k, f, maps.len() as u64, held) && remap(k, f, (new_order, at), maps, held, list) {
            Ok(())
        } else {
            Err(Errno::EAGAIN)
        }
    })?;
    drop(lock);
    Ok(())
}

/// `deferred_split_scan`, the shrinker of the deferred split queue: up to
/// `nr` queued folios are taken; a partially mapped one is split to pages
/// (`split_folio`) or, if it cannot be now, goes back to the queue's tail;
/// a whole THP (queued from 6.12) is split if underused
/// ([`thp_underused`]: `thp_underused_split_page`), else left off the
/// queue. Returns how many were split. Differs from Linux: an mlocked THP
/// is judged too (the model keeps no `PG_mlocked`), and
/// `split_underused_thp` is always on.
pub fn deferred_split_scan(k: &Kernel, mmlist: &MmList, nr: usize) -> usize {
    let mut split = 0;
    for pfn in k.deferred_split_take(nr) {
        let f = Folio::from_head(&k.phys, pfn);
        let queued = f.is_large() && f.test_anon() && f.page(1).test(crate::phys::pg::DEFERRED);
        if !queued || !f.try_get() {
            continue;
        }
        let partial = f.page(1).test(crate::phys::pg::PARTIALLY_MAPPED);
        let underused = !partial && thp_underused(k, f);
        if !partial && !underused {
            k.deferred_split_drop(f);
        } else if split_folio_to_order(k, mmlist, f, 0, 1, None).is_ok() {
            split += 1;
            if underused {
                Stats::inc(&k.stats.thp_underused_split_page);
            }
        } else if partial {
            // Back on the queue while the reference keeps it alive: a free
            // then takes it off again.
            k.deferred_split_requeue([pfn]);
        } else {
            k.deferred_split_drop(f);
        }
        k.folio_put_refs(Folio::containing(&k.phys, pfn), 1);
    }
    split
}

/// `thp_underused`: more of the THP's pages are zero-filled than
/// khugepaged's `max_ptes_none` allows (never with the default 511).
fn thp_underused(k: &Kernel, f: Folio) -> bool {
    let max_none = k.thp.khugepaged.get(crate::folio::thp::khugepaged::KhugepagedKnob::MaxPtesNone) as u64;
    if max_none >= f.nr_pages() - 1 {
        return false;
    }
    let zero = (0..f.nr_pages()).filter(|&i| zero_filled(k, f.pfn + i)).count() as u64;
    zero > max_none
}

/// `can_split_folio`: the mappings found are all the folio's, and nothing
/// but them and the caller's `held` references holds it.
fn can_split(k: &Kernel, f: Folio, found: u64, held: i32) -> bool {
    let mapcount = rmap::folio_mapcount(k, f);
    found == mapcount && f.refcount() as u64 == mapcount + held as u64 && k.folio_swap(f).is_none()
}

/// The split under every table's lock: the folio's references are frozen
/// (`folio_ref_freeze`: false, nothing done, if one came or went since they
/// were counted), the mappings leave `f` (a shmem folio's entries are
/// cleared), it becomes folios of `order` (around page `at` if given; the
/// caller's `held` references on the first), each anon mapping joins its
/// new folio; from 6.12 a zero-filled page split to a page of its own is
/// mapped by the shared zero page instead, outside mlocked VMAs
/// (`try_to_map_unused_to_zeropage`), and freed.
fn remap<'k>(
    k: &'k Kernel,
    f: Folio<'k>,
    (order, at): (u32, Option<u64>),
    maps: &[Mapping],
    held: i32,
    list: Option<&mut Vec<Folio<'k>>>,
) -> bool {
    let phys = &k.phys;
    let refs = maps.len() as i32 + held;
    if f.head().refcount.compare_exchange(refs, 0, AcqRel, Acquire).is_err() {
        return false;
    }
    let exclusive: Vec<bool> = maps.iter().map(|m| f.anon_exclusive(m.page)).collect();
    let file = !f.test_anon();
    for m in maps {
        rmap::folio_remove_rmap(k, f, m.page, 1, Level::Pte, m.mm.rmap);
        // try_to_migrate_one() and try_to_unmap_one(): a dirty entry
        // dirties the folio, which every piece inherits.
        let e = if file { take(phys, m.table, m.idx) } else { load(phys, m.table, m.idx) };
        if e.dirty() {
            f.head().set(crate::phys::pg::DIRTY);
        }
        if file {
            // unmap_folio() only unmaps a file folio (try_to_unmap, mlock
            // ignored), and remap_page() leaves it so: its pages are
            // faulted in again on the next access.
            m.mm.add_rss(f, -1);
            m.mm.tlb.flush_range(&k.stats, m.addr, m.addr + PAGE_SIZE);
        } else if e.dirty() {
            // remove_migration_pte() re-dirties the entry with pte_mkdirty,
            // soft-dirty with it.
            store(phys, m.table, m.idx, e.with(Pte::MKDIRTY));
        }
    }
    // Each piece gets one reference per page: a shmem folio's stay as the
    // page cache's (the cache's index still names the same frames), of
    // `held` the caller's alone go to the first piece.
    let cache = if file { f.nr_pages() as i32 } else { 0 };
    let pieces = k.split_unmapped_folio_to_order(f, order, at, 1);
    Folio::from_head(phys, pieces[0].0).ref_add(held - cache);
    let to_zero = !file && k.config.release().split_maps_zero_pages_to_zero_page();
    for (m, excl) in maps.iter().zip(exclusive).filter(|_| !file) {
        let piece = Folio::containing(phys, f.pfn + m.page);
        if to_zero && !m.locked && piece.order() == 0 && zero_filled(k, piece.pfn) {
            // The VMA's protection: a PROT_NONE entry stays inaccessible.
            let prot = load(phys, m.table, m.idx).0 & (Pte::PRESENT | Pte::PROTNONE);
            store(phys, m.table, m.idx, Pte::new(k.zero_pfn, prot | Pte::USER | Pte::SPECIAL | Pte::ACCESSED));
            m.mm.tlb.flush_range(&k.stats, m.addr, m.addr + PAGE_SIZE);
            m.mm.add_anon_rss(-1);
            continue;
        }
        piece.ref_add(1);
        rmap::folio_add_anon_rmap_ptes(k, piece, f.pfn + m.page - piece.pfn, 1, m.mm.rmap, excl);
    }
    if let Some(list) = list {
        for &(pfn, _) in &pieces[1..] {
            let piece = Folio::from_head(phys, pfn);
            if file || rmap::folio_mapcount(k, piece) > 0 {
                piece.ref_add(1);
                list.push(piece);
            }
        }
    }
    for &(pfn, o) in &pieces {
        // Every piece came out locked (PG_locked copied): all but the
        // first, whose lock the caller holds, are unlocked before the
        // split's own references go (the last ones of a folio nothing maps).
        if pfn != pieces[0].0 {
            phys.page(pfn).clear(crate::phys::pg::LOCKED);
        }
        if !file {
            k.folio_put_refs(Folio::from_head(phys, pfn), 1 << o);
        }
    }
    true
}

/// Whether the page at `pfn` holds only zeros (`pages_identical` with the
/// zero page).
fn zero_filled(k: &Kernel, pfn: Pfn) -> bool {
    let mut buf = vec![0u8; PAGE_SIZE as usize];
    k.phys.read_bytes(pfn, 0, &mut buf);
    buf.iter().all(|&b| b == 0)
}
