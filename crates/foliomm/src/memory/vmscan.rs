//! Reclaim of swap-backed folios, anon and shmem, to swap (mm/vmscan.c `shrink_folio_list`,
//! `shrink_inactive_list`, `shrink_active_list`, `shrink_lruvec`,
//! `try_to_free_pages`), for `MADV_PAGEOUT` ([`super::madvise_cold`]) and
//! for an allocation that found no free memory ([`alloc_folio_reclaim`]).
//!
//! Differs from Linux: one node, no memcg, no file LRU (shmem folios are
//! swap-backed: on the anon lists, as in Linux), no kswapd thread (the allocating task does its work under
//! the low watermark), no writeback (the device is synchronous:
//! `swap_writeout` completes at once); an mlocked folio goes back to the
//! active list, not the unevictable one.

use super::folio_mappings::unmap_file_folio;
use super::rmap_walk::{folio_referenced, try_to_unmap};
use super::split::{deferred_split_scan, split_folio_to_order};
use crate::arch::{SwpEntry, PAGE_SIZE, PMD_ORDER};
use crate::folio::Folio;
use crate::kernel::lru::LruList;
use crate::kernel::{Kernel, Stats};
use crate::mm_types::MmList;
use crate::phys::pg;
use crate::phys::Placement;
use crate::rmap;
use crate::shmem::cache_refs;
use crate::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use crate::{Errno, Result};

/// `SWAP_CLUSTER_MAX`: folios reclaim takes off a list at a time, and what
/// direct reclaim tries to free before the allocation is retried.
pub(super) const SWAP_CLUSTER_MAX: usize = 32;
/// `DEF_PRIORITY`: the first pass scans a list's size >> 12.
const DEF_PRIORITY: u32 = 12;
/// `MAX_RECLAIM_RETRIES`: reclaim rounds an allocation tries before it fails.
const MAX_RECLAIM_RETRIES: u32 = 16;

/// How a folio is reclaimed: by the LRU scan ([`Reclaim::LRU`],
/// `shrink_inactive_list`) or by `reclaim_pages` ([`Reclaim::PAGES`],
/// `MADV_PAGEOUT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reclaim {
    /// Its references are not asked (`reclaim_pages`; a split folio's
    /// head, which was asked before the split).
    ignore_references: bool,
    /// What stays goes back through the CPU's LRU batch
    /// (`folio_putback_lru`), not straight on its list
    /// (`move_folios_to_lru`).
    through_batch: bool,
}

impl Reclaim {
    pub(crate) const LRU: Reclaim = Reclaim { ignore_references: false, through_batch: false };
    pub(crate) const PAGES: Reclaim = Reclaim { ignore_references: true, through_batch: true };
}

/// What became of a folio reclaim looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    Freed,
    Keep,
    Activate,
}

/// `shrink_folio_list` for one folio taken off the LRU with a reference
/// (which this consumes): anon, or read in by a swap-in and never mapped
/// ([`shrink_anon_folio`]), or shmem ([`shrink_shmem_folio`]). Returns
/// true if it was freed.
pub(crate) fn shrink_folio(k: &Kernel, mmlist: &MmList, f: Folio, how: Reclaim) -> bool {
    match f.test_anon() || k.unmapped_swapcache(f) {
        true => shrink_anon_folio(k, mmlist, f, how),
        false => shrink_shmem_folio(k, mmlist, f, how),
    }
}

/// [`shrink_folio`] for an anon folio; a KSM folio is activated (Linux
/// reclaims it, see the body). Unless `how` ignores references, a folio
/// whose mappings were accessed stays (`folio_check_references`). A folio that may be pinned stays; one in the
/// swap cache keeps its slots; a large one something else holds stays (it
/// could not be split if need be: `can_split_folio`); else it gets a run of
/// slots (`folio_alloc_swap`, then `folio_mark_dirty`: its bytes are nowhere
/// else), and a large one that gets none, or is partially mapped, is split
/// first ([`split_and_reclaim`]). It
/// is then unmapped everywhere ([`try_to_unmap`]; if that fails it stays in
/// the swap cache, activated, as Linux leaves it) and, if nothing else
/// holds it (`is_page_cache_freeable`: a FOLL_GET keeps it there, dirty and
/// unwritten), written out, taken from the swap cache and freed
/// (`__remove_mapping`). A folio not freed goes back on a list. Returns
/// true if it was freed.
fn shrink_anon_folio(k: &Kernel, mmlist: &MmList, f: Folio, how: Reclaim) -> bool {
    if f.test_ksm() {
        // Differs from Linux, which swaps KSM folios out through
        // rmap_walk_ksm and copies them at swap-in where another
        // anon_vma maps the entry (ksm_might_need_to_copy).
        return putback(k, f, Verdict::Activate, how);
    }
    let Some(lock) = f.trylock() else {
        return putback(k, f, Verdict::Keep, how);
    };
    let verdict = if how.ignore_references { Verdict::Freed } else { check_references(k, mmlist, f) };
    let pinned = k.folio_swap(f).is_none() && f.maybe_dma_pinned();
    if verdict != Verdict::Freed || pinned {
        drop(lock);
        return putback(k, f, if pinned { Verdict::Keep } else { verdict }, how);
    }
    if !f.head().test(pg::SWAPBACKED) {
        drop(lock);
        return super::vmscan_lazyfree::drop_lazyfree(k, mmlist, f, how);
    }
    let slots = match k.folio_swap(f) {
        Some(e) => Ok(e),
        None if f.is_large() && f.refcount() as u64 != rmap::folio_mapcount(k, f) + 1 => Err(Verdict::Activate),
        // A partially mapped folio is split first: its unmapped pages go
        // without I/O.
        None if f.is_large() && f.page(1).test(pg::PARTIALLY_MAPPED) => {
            drop(lock);
            return split_and_reclaim(k, mmlist, f, how);
        }
        None => match k.add_to_swap(f) {
            Ok(e) => {
                f.head().set(pg::DIRTY);
                Ok(e)
            }
            Err(_) if f.is_large() => {
                drop(lock);
                if f.order() == PMD_ORDER {
                    Stats::inc(&k.stats.thp_swpout_fallback);
                }
                Stats::inc(&k.stats.swpout_fallback[f.order() as usize]);
                return split_and_reclaim(k, mmlist, f, how);
            }
            Err(_) => Err(Verdict::Activate),
        },
    };
    let verdict = match slots {
        Ok(e) if !try_to_unmap(k, mmlist, f, Some(e)) => Verdict::Activate,
        Ok(e) if f.refcount() == 1 + f.nr_pages() as i32 && remove_mapping(k, f, e) => {
            drop(lock);
            return free_or_putback(k, f, true, Verdict::Keep, how);
        }
        Ok(_) => Verdict::Keep,
        Err(v) => v,
    };
    drop(lock);
    putback(k, f, verdict, how)
}

/// [`shrink_folio`] for a shmem folio. Unless `how` ignores references, a
/// folio whose mappings were accessed stays, as an anon one does. It is
/// unmapped everywhere through the file's `i_mmap` ([`unmap_file_folio`],
/// a dirty entry dirtying it; a mapping in an mlocked VMA keeps it). If
/// nothing but the page cache and this reference holds it then, a clean
/// one leaves the cache (`__remove_mapping`: a hole reads the zeros it
/// held), and a dirty one is written out (`shmem_writeout`): it gets swap
/// slots, is written there (`swap_writeout`), is named by its swap entry
/// in the cache, and is freed. A large one is written whole from 6.12 (a
/// run of slots, one large entry); it is split first, its pages reclaimed
/// one by one, before 6.12, when it reaches past the end of the file
/// (Linux: past `fallocend` too), or when no run of slots is free
/// (`try_split`). Without a swap device or a slot it is activated
/// (`redirty`). Returns true if it was freed.
fn shrink_shmem_folio(k: &Kernel, mmlist: &MmList, f: Folio, how: Reclaim) -> bool {
    let inode = mmlist.inode(f.head().link.load(crate::sync::atomic::Ordering::Relaxed));
    let (Some(inode), Some(lock)) = (inode, f.trylock()) else {
        return putback(k, f, Verdict::Keep, how);
    };
    let verdict = if how.ignore_references { Verdict::Freed } else { check_references(k, mmlist, f) };
    if verdict != Verdict::Freed {
        drop(lock);
        return putback(k, f, verdict, how);
    }
    match unmap_file_folio(k, mmlist, f, false) {
        Ok(true) => f.head().set(pg::DIRTY),
        Ok(false) => {}
        Err(_) => {
            drop(lock);
            return putback(k, f, Verdict::Activate, how);
        }
    }
    if f.refcount() != cache_refs(f) + 1 {
        drop(lock);
        return putback(k, f, Verdict::Keep, how);
    }
    if !f.head().test(pg::DIRTY) {
        let freed =
            inode.remove_for_reclaim(f, None) && f.head().refcount.compare_exchange(1, 0, AcqRel, Acquire).is_ok();
        drop(lock);
        return free_or_putback(k, f, freed, Verdict::Keep, how);
    }
    let whole = k.config.release().swaps_out_large_shmem_folios() && f.index() + f.nr_pages() <= inode.nr_pages();
    let slots = match f.is_large() && !whole {
        true => Err(()),
        false => k.add_to_swap(f).map_err(drop),
    };
    let e = match slots {
        Ok(e) => e,
        Err(()) if f.is_large() && k.swap.is_some() => {
            drop(lock);
            return split_and_reclaim(k, mmlist, f, how);
        }
        Err(()) => {
            drop(lock);
            return putback(k, f, Verdict::Activate, how);
        }
    };
    // The slots hold the bytes before the cache names them: a swap-in
    // that finds the entry at once reads them.
    swap_writeout(k, f, e);
    let freed = if inode.remove_for_reclaim(f, Some(e)) {
        count_swpout(k, f);
        remove_mapping(k, f, e)
    } else {
        f.head().set(pg::DIRTY);
        k.delete_from_swap_cache(f);
        false
    };
    drop(lock);
    free_or_putback(k, f, freed, Verdict::Keep, how)
}

/// Frees `f`, whose references `__remove_mapping` froze, counting it
/// reclaimed; or, not `freed`, puts it back as `verdict` says.
pub(super) fn free_or_putback(k: &Kernel, f: Folio, freed: bool, verdict: Verdict, how: Reclaim) -> bool {
    if !freed {
        return putback(k, f, verdict, how);
    }
    k.free_frozen_folio(f);
    Stats::inc(&k.stats.pgsteal_anon);
    true
}

/// `folio_check_references` for a swap-backed (anon or shmem) folio: mapped in an mlocked VMA,
/// or found referenced a second time (or in more than one VMA), it goes to
/// the active list; referenced once, it stays inactive, marked
/// `PG_referenced`; unreferenced, it is reclaimed (`Freed` as the wish).
fn check_references(k: &Kernel, mmlist: &MmList, f: Folio) -> Verdict {
    let r = folio_referenced(k, mmlist, f);
    if r.mlocked {
        return Verdict::Activate;
    }
    let was_referenced = f.head().test(pg::REFERENCED);
    f.head().clear(pg::REFERENCED);
    if r.vmas == 0 {
        return Verdict::Freed;
    }
    f.head().set(pg::REFERENCED);
    if was_referenced || r.vmas > 1 {
        Verdict::Activate
    } else {
        Verdict::Keep
    }
}

/// `pageout` (`swap_writeout`) of the unmapped `f` if it is dirty (a clean
/// one's slots hold its bytes already), then `__remove_mapping`: if its
/// references are still the isolation's and the swap cache's, they are
/// frozen at 0 (`folio_ref_freeze`: a swap-in finding it in the cache
/// meanwhile cannot take one) and it leaves the swap cache, to be freed by
/// the caller. Returns false, `f` left written and clean in the swap
/// cache, if a reference came meanwhile.
fn remove_mapping(k: &Kernel, f: Folio, e: SwpEntry) -> bool {
    if f.head().test(pg::DIRTY) {
        swap_writeout(k, f, e);
        count_swpout(k, f);
    }
    let refs = 1 + f.nr_pages() as i32;
    if f.head().refcount.compare_exchange(refs, 0, AcqRel, Acquire).is_err() {
        return false;
    }
    k.remove_from_swap_cache(f);
    true
}

/// Puts `f` back unless it was freed, on the list `verdict` says, and
/// drops the isolation reference; returns whether it was freed. LRU
/// reclaim puts it back on its list at once (`move_folios_to_lru`);
/// `reclaim_pages` through this CPU's `lru_add` batch (`folio_putback_lru`),
/// so that it waits there, on no list, until the batch moves.
pub(super) fn putback(k: &Kernel, f: Folio, verdict: Verdict, how: Reclaim) -> bool {
    let which = match verdict {
        Verdict::Freed => {
            Stats::inc(&k.stats.pgsteal_anon);
            None
        }
        Verdict::Keep => Some(LruList::Inactive),
        Verdict::Activate => {
            Stats::inc(&k.stats.pgactivate);
            Some(LruList::Active)
        }
    };
    match (which, how.through_batch) {
        (None, _) => {}
        (Some(which), false) => k.lru.putback(f, which),
        (Some(which), true) => {
            if which == LruList::Active {
                f.head().set(pg::ACTIVE);
            }
            k.folio_add_lru(f);
        }
    }
    k.folio_put_refs(f, 1);
    verdict == Verdict::Freed
}

/// A large folio that is partially mapped, or got no run of swap slots
/// (the caller counted `thp_swpout_fallback` / `swpout_fallback`), is
/// split (`split_folio_to_list`, wherever it is mapped) and its pages
/// reclaimed one by one: the first with the isolation reference (its
/// references asked already), the others still mapped from the split's
/// list (asked, unless `how` ignores them). A folio that cannot be split
/// goes back to the active list. Returns false (the folio as such was not
/// freed).
fn split_and_reclaim(k: &Kernel, mmlist: &MmList, f: Folio, how: Reclaim) -> bool {
    let mut pieces = Vec::new();
    if split_folio_to_order(k, mmlist, f, 0, 1, Some(&mut pieces)).is_err() {
        return putback(k, f, Verdict::Activate, how);
    }
    let head = Reclaim { ignore_references: true, ..how };
    shrink_folio(k, mmlist, Folio::containing(&k.phys, f.pfn), head);
    for page in pieces {
        shrink_folio(k, mmlist, page, how);
    }
    false
}

/// `count_swpout_vm_event`: `pswpout` per page, `thp_swpout` for a
/// PMD-sized folio, the mTHP `swpout` stat per folio of its order.
/// `swap_writeout` of `f`'s pages to its slots from `e`; `f` is clean
/// afterwards.
fn swap_writeout(k: &Kernel, f: Folio, e: SwpEntry) {
    let dev = k.swap.as_ref().expect("a slot implies a device");
    f.head().clear(pg::DIRTY);
    for p in 0..f.nr_pages() {
        dev.write(&k.phys, SwpEntry { offset: e.offset + p, ..e }, f.pfn + p);
    }
}

/// The swap-out counters for `f`: `pswpout`, and `thp_swpout` / mTHP
/// `swpout` for a large folio.
fn count_swpout(k: &Kernel, f: Folio) {
    Stats::add(&k.stats.pswpout, f.nr_pages());
    if f.order() == PMD_ORDER {
        Stats::inc(&k.stats.thp_swpout);
    }
    if f.is_large() {
        Stats::inc(&k.stats.swpout[f.order() as usize]);
    }
}

/// `shrink_inactive_list`: up to `nr` folios from the inactive tail, each
/// through [`shrink_folio`]; returns how many were freed.
fn shrink_inactive_list(k: &Kernel, mmlist: &MmList, nr: usize) -> usize {
    k.lru_add_drain();
    let folios = k.lru.isolate_tail(&k.phys, LruList::Inactive, nr);
    Stats::add(&k.stats.pgscan_anon, folios.len() as u64);
    folios.into_iter().filter(|&f| shrink_folio(k, mmlist, f, Reclaim::LRU)).count()
}

/// `shrink_active_list`: up to `nr` folios from the active tail go to the
/// inactive head, `PG_referenced` kept; their accessed bits are looked at
/// and cleared (`folio_referenced`), which keeps only executable file
/// folios active.
fn shrink_active_list(k: &Kernel, mmlist: &MmList, nr: usize) {
    for f in k.lru.isolate_tail(&k.phys, LruList::Active, nr) {
        folio_referenced(k, mmlist, f);
        k.lru.putback(f, LruList::Inactive);
        Stats::add(&k.stats.pgdeactivate, f.nr_pages());
        k.folio_put_refs(f, 1);
    }
}

/// `inactive_is_low` for anon: the inactive list is short of the active
/// one by more than the ratio for the memory on them (`int_sqrt(10 * GiB)`,
/// 1 under 1 GiB).
fn inactive_is_low(inactive: usize, active: usize) -> bool {
    let gib = ((inactive + active) as u64 * PAGE_SIZE) >> 30;
    let ratio = if gib == 0 { 1 } else { (10 * gib).isqrt() as usize };
    inactive * ratio < active
}

/// `try_to_free_pages` → `shrink_lruvec` for the anon lists, priority by
/// priority (a list's size >> priority scanned on each), until
/// `SWAP_CLUSTER_MAX` folios are freed; without a swap device
/// (`can_reclaim_anon_pages` false) only lazily freed folios, which Linux
/// keeps on the file LRU ([`shrink_lazyfree`]). Returns the folios freed.
pub fn try_to_free_pages(k: &Kernel, mmlist: &MmList) -> usize {
    if k.swap.is_none() {
        return super::vmscan_lazyfree::shrink_lazyfree(k, mmlist);
    }
    // shrink_slab(): the deferred split queue's shrinker frees the unmapped
    // parts of partially mapped folios (not counted as reclaimed, as in
    // Linux; the model scans up to 128 queued folios each time where Linux
    // scales the scan by the priority).
    deferred_split_scan(k, mmlist, SWAP_CLUSTER_MAX * 4);
    let mut freed = 0;
    for priority in (0..=DEF_PRIORITY).rev() {
        let (inactive, active) = k.lru.sizes();
        if inactive_is_low(inactive, active) {
            shrink_active_list(k, mmlist, (active >> priority).max(1));
        }
        let mut scan = k.lru.sizes().0 >> priority;
        while scan > 0 && freed < SWAP_CLUSTER_MAX {
            let batch = scan.min(SWAP_CLUSTER_MAX);
            freed += shrink_inactive_list(k, mmlist, batch);
            scan -= batch;
        }
        if freed >= SWAP_CLUSTER_MAX {
            break;
        }
    }
    freed
}

/// Whether reclaim can free anything: with a swap device, or lazily freed
/// folios (`MADV_FREE`) without one.
pub(super) fn reclaimable(k: &Kernel) -> bool {
    k.swap.is_some() || k.stats.pglazyfree.load(Relaxed) > 0
}

/// An order-0 folio for a user page (`GFP_HIGHUSER_MOVABLE`), zeroed or
/// not, with reclaim ([`retry_after_reclaim`]). The caller holds no
/// page-table lock.
pub fn alloc_folio_reclaim<'k>(k: &'k Kernel, mmlist: &MmList, place: Placement, zeroed: bool) -> Result<Folio<'k>> {
    retry_after_reclaim(k, mmlist, || k.alloc_folio_on(place, 0, zeroed))
}

/// A page-table page for a fault (`pte_alloc_one`: `GFP_PGTABLE_USER` may
/// reclaim), with reclaim ([`reclaim_on_enomem`]). The caller holds no
/// page-table lock.
pub fn alloc_table_reclaim(k: &Kernel, mmlist: &MmList) -> Result<crate::arch::Pfn> {
    reclaim_on_enomem(k, mmlist, || k.alloc_table())
}

/// `op` (a page-table allocation, or a walk that allocates tables), and
/// only if it fails with ENOMEM, [`retry_after_reclaim`]: the fault's
/// common path pays nothing for the watermark check (a table is one page;
/// the folio the fault allocates next checks it anyway).
pub fn reclaim_on_enomem<T>(k: &Kernel, mmlist: &MmList, mut op: impl FnMut() -> Result<T>) -> Result<T> {
    match op() {
        Err(Errno::ENOMEM) => retry_after_reclaim(k, mmlist, op),
        got => got,
    }
}

/// Runs `op`, an allocation or a call that fails with ENOMEM when one
/// does, with reclaim (`__alloc_pages_slowpath`). With a swap device, free
/// memory under the low watermark is reclaimed first (kswapd's work, done
/// here by the calling task, so that the page tables a fault allocates
/// without reclaim find room); when `op` fails with ENOMEM, direct reclaim
/// runs and `op` is run again, up to `MAX_RECLAIM_RETRIES` rounds, with or
/// without progress (yielding after a round without); its ENOMEM after that (the OOM killer is not
/// modelled). The caller holds no page-table lock and no page cache's lock.
pub fn retry_after_reclaim<T>(k: &Kernel, mmlist: &MmList, mut op: impl FnMut() -> Result<T>) -> Result<T> {
    if reclaimable(k) && k.phys.nr_free() < k.low_watermark() {
        Stats::inc(&k.stats.pageoutrun);
        try_to_free_pages(k, mmlist);
    }
    // should_reclaim_retry(): rounds that free nothing count too (another
    // task may hold the folios isolated or locked for now, or its freed
    // pages in an unflushed mmu_gather), up to the limit; after such a
    // round the task lets the others run first (the slow path's
    // `cond_resched`).
    let (mut rounds, mut spins) = (0, 0);
    loop {
        match op() {
            Err(Errno::ENOMEM) if rounds < MAX_RECLAIM_RETRIES && reclaimable(k) => {
                Stats::inc(&k.stats.allocstall);
                if try_to_free_pages(k, mmlist) == 0 {
                    crate::sync::backoff(&mut spins, 0);
                    crate::sync::thread::yield_now();
                }
                rounds += 1;
            }
            got => return got,
        }
    }
}
