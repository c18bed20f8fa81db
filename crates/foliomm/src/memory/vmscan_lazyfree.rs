//! Reclaim of lazily freed folios (`MADV_FREE`; mm/vmscan.c
//! `shrink_folio_list`'s branch for a clean anon folio without
//! `PG_swapbacked`, and the scan that finds them without a swap device).

use super::rmap_walk::try_to_unmap;
use super::vmscan::{free_or_putback, putback, reclaimable, shrink_folio, Reclaim, Verdict, SWAP_CLUSTER_MAX};
use crate::folio::Folio;
use crate::kernel::lru::LruList;
use crate::kernel::{Kernel, Stats};
use crate::mm_types::MmList;
use crate::phys::pg;
use crate::sync::atomic::Ordering::{AcqRel, Acquire};

/// `shrink_anon_folio` for a lazily freed folio (`MADV_FREE`): no swap
/// slots; it is unmapped everywhere and dropped ([`try_to_unmap`] without a
/// slot), and freed if nothing else holds it (`folio_ref_freeze(folio,
/// 1)`), counted in `pglazyfreed`. One written since is swap-backed again
/// and activated, to be swapped like any other (`nr_lazyfree_fail`).
pub(super) fn drop_lazyfree(k: &Kernel, mmlist: &MmList, f: Folio, how: Reclaim) -> bool {
    let Some(lock) = f.trylock() else {
        return putback(k, f, Verdict::Keep, how);
    };
    if !try_to_unmap(k, mmlist, f, None) {
        drop(lock);
        return putback(k, f, Verdict::Activate, how);
    }
    drop(lock);
    if f.head().refcount.compare_exchange(1, 0, AcqRel, Acquire).is_err() {
        return putback(k, f, Verdict::Keep, how);
    }
    Stats::add(&k.stats.pglazyfreed, f.nr_pages());
    free_or_putback(k, f, true, Verdict::Keep, how)
}

/// Reclaim without a swap device: the lazily freed folios on the inactive
/// list, oldest first, up to `SWAP_CLUSTER_MAX` freed; the others go back
/// where they were. Differs from Linux, where they are on the file LRU and
/// scanned by priority with the file folios.
pub(super) fn shrink_lazyfree(k: &Kernel, mmlist: &MmList) -> usize {
    if !reclaimable(k) {
        return 0;
    }
    k.lru_add_drain();
    let (inactive, _) = k.lru.sizes();
    let (mut freed, mut others) = (0, Vec::new());
    for f in k.lru.isolate_tail(&k.phys, LruList::Inactive, inactive) {
        let lazy = f.test_anon() && !f.head().test(pg::SWAPBACKED);
        if lazy && freed < SWAP_CLUSTER_MAX {
            Stats::inc(&k.stats.pgscan_anon);
            freed += shrink_folio(k, mmlist, f, Reclaim::LRU) as usize;
        } else {
            others.push(f);
        }
    }
    // Oldest first to the head: they stand as they stood.
    for f in others {
        k.lru.putback(f, LruList::Inactive);
        k.folio_put_refs(f, 1);
    }
    freed
}
