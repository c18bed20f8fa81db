//! A shmem file's pages on swap (mm/shmem.c `shmem_writeout`,
//! `shmem_swapin_folio`, `shmem_free_swap`): the page cache names a
//! swapped-out page by its swap entry (`swp_to_radix_entry`, a value entry
//! in the xarray) where it held the folio; reading, writing, faulting or
//! fallocating the page reads it back into a new folio and frees the slot;
//! truncation and hole punches free the slots they cover.
//!
//! Differs from Linux: order-0 folios only (a large shmem folio is not
//! paged out: Linux writes it out whole where `CONFIG_THP_SWAP` allows);
//! no swap cache between the two directions (a folio is written out only
//! when nothing but the cache and reclaim holds it, and freed at once, as
//! on a synchronous device); no readahead; no `shmem_swaplist`.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};

use super::{cache_refs, Inode};
use crate::arch::{Pfn, SwpEntry};
use crate::folio::Folio;
use crate::kernel::Stats;
use crate::phys::pg;
use crate::sync::atomic::Ordering::Relaxed;
use crate::Result;

/// `i_pages`: page index to the pfn of the page cached there (the map this
/// derefs to), and to the swap entry of a page swapped out.
#[derive(Default)]
pub struct PageCache {
    folios: BTreeMap<u64, Pfn>,
    /// The swapped-out pages: index to swap entry.
    pub swapped: BTreeMap<u64, SwpEntry>,
}

impl Deref for PageCache {
    type Target = BTreeMap<u64, Pfn>;

    fn deref(&self) -> &BTreeMap<u64, Pfn> {
        &self.folios
    }
}

impl DerefMut for PageCache {
    fn deref_mut(&mut self) -> &mut BTreeMap<u64, Pfn> {
        &mut self.folios
    }
}

impl Inode {
    /// `shmem_swapin_folio` (with `SWP_SYNCHRONOUS_IO`, as zram is): page
    /// `index`, swapped out, is read into a new order-0 folio that takes
    /// its place in `pages`, dirty (its slot is freed: `swap_free_nr`);
    /// returns its pfn. ENOMEM when no folio can be had.
    pub(super) fn swapin(&self, pages: &mut PageCache, index: u64) -> Result<Pfn> {
        let k = &*self.k;
        let e = pages.swapped[&index];
        let f = k.alloc_folio_zeroed(0)?;
        let dev = k.swap.as_ref().expect("a swap entry implies a device");
        dev.read(&k.phys, e, f.pfn);
        f.head().set(pg::SWAPBACKED | pg::UPTODATE | pg::DIRTY);
        f.head().link.store(self.ino, Relaxed);
        f.set_index(index);
        pages.swapped.remove(&index);
        pages.insert(index, f.pfn);
        dev.put(e, 1);
        Stats::inc(&k.stats.pswpin);
        Ok(f.pfn)
    }

    /// Swaps in every swapped-out page of `[first, first + nr)`, as
    /// `collapse_file` does with `shmem_get_folio(SGP_NOALLOC)` before it
    /// copies a range (Linux allocates the new folio first).
    pub(crate) fn swapin_range(&self, first: u64, nr: u64) -> Result<()> {
        let mut pages = self.pages.lock().unwrap();
        let swapped: Vec<u64> = pages.swapped.range(first..first + nr).map(|(&i, _)| i).collect();
        for index in swapped {
            self.swapin(&mut pages, index)?;
        }
        Ok(())
    }

    /// `shmem_delete_from_page_cache(folio, swp_to_radix_entry(swap))`: the
    /// unmapped order-0 `f` leaves the cache, which names its page by `e`
    /// (given a reference on the slot: `swap_shmem_alloc`) from now on; or,
    /// with no `e` (a clean folio: `__remove_mapping`), leaves a hole. The
    /// cache's reference on `f` is dropped. False, nothing done, if `f` is
    /// no longer this cache's, something but the cache, the caller's
    /// reference and the swap cache holds it, or it was written since the
    /// caller found it clean or wrote it to `e` (`PG_dirty` again: a
    /// `pwrite` or a partial hole punch changes its bytes under the
    /// cache's lock, where Linux's hold the folio lock). Checked under the
    /// cache's lock, which every lookup that takes a reference holds.
    pub(crate) fn remove_for_reclaim(&self, f: Folio, e: Option<SwpEntry>) -> bool {
        let mut pages = self.pages.lock().unwrap();
        let index = f.index();
        let expected = cache_refs(f) + 1 + e.is_some() as i32;
        let changed = f.head().test(pg::DIRTY);
        if pages.get(&index) != Some(&f.pfn) || f.is_large() || f.refcount() != expected || changed {
            return false;
        }
        pages.remove(&index);
        if let Some(e) = e {
            self.k.swap.as_ref().expect("a slot implies a device").duplicate(e, 1);
            pages.swapped.insert(index, e);
        }
        f.head().link.store(0, Relaxed);
        f.put_refs(cache_refs(f));
        true
    }

    /// `shmem_free_swap` over the pages `[first, end)`: the slots of those
    /// swapped out are freed (`free_swap_and_cache_nr`) and their entries
    /// dropped.
    pub(super) fn free_swap(&self, pages: &mut PageCache, first: u64, end: u64) {
        if first >= end {
            return;
        }
        let gone: Vec<(u64, SwpEntry)> = pages.swapped.range(first..end).map(|(&i, &e)| (i, e)).collect();
        for (index, e) in gone {
            pages.swapped.remove(&index);
            self.k.swap.as_ref().expect("a swap entry implies a device").put(e, 1);
        }
    }

    /// Every swapped-out page as (index, swap entry), in index order.
    pub fn swapped(&self) -> Vec<(u64, SwpEntry)> {
        self.pages.lock().unwrap().swapped.iter().map(|(&i, &e)| (i, e)).collect()
    }
}
