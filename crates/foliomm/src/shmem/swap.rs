//! A shmem file's pages on swap (mm/shmem.c `shmem_writeout`,
//! `shmem_swapin_folio`, `shmem_free_swap`): the page cache names a
//! swapped-out page by its swap entry (`swp_to_radix_entry`, a value entry
//! in the xarray) where it held the folio; reading, writing, faulting or
//! fallocating the page reads it back into a new folio and frees the slot;
//! truncation and hole punches free the slots they cover.
//!
//! A large folio written out whole is named by one large entry (a
//! multi-index xarray entry: here its first index and order beside the
//! per-page entries); read back whole where the release does, else page by
//! page, the entry split (`shmem_split_large_entry`).
//!
//! Differs from Linux: no swap cache between the two directions (a folio
//! is written out only when nothing but the cache and reclaim holds it,
//! and freed at once, as on a synchronous device); no readahead; no
//! `shmem_swaplist`; a truncation or punch covering part of a large entry
//! splits it and frees the pages it covers.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};

use super::{cache_refs, Inode};
use crate::arch::{Pfn, SwpEntry, PAGE_SIZE};
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
    /// The large swap entries: first index to order.
    large: BTreeMap<u64, u32>,
}

impl PageCache {
    /// The first index and order of the swap entry naming page `index`
    /// (`xa_get_order`): `(index, 0)` for a page of its own.
    pub(super) fn swap_order(&self, index: u64) -> (u64, u32) {
        match self.large.range(..=index).next_back() {
            Some((&first, &order)) if index < first + (1 << order) => (first, order),
            _ => (index, 0),
        }
    }

    /// `shmem_split_large_entry` for every large entry that `[first, end)`
    /// meets: its pages are named one by one from now on.
    fn split_entries(&mut self, first: u64, end: u64) {
        let from = self.swap_order(first).0;
        self.large.retain(|&f, _| f < from || f >= end);
    }
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
    /// `shmem_swapin_folio` (with `SWP_SYNCHRONOUS_IO`, as zram is): the
    /// swapped-out page `index` is read into a new folio that takes its
    /// place in `pages`, dirty, on the LRU, its slots freed
    /// (`swap_free_nr`); returns the page's pfn. A large entry is read
    /// whole into a folio of its order where the release does and one can
    /// be had (`shmem_swap_alloc_folio`), else the entry is split and the
    /// page read alone. ENOMEM when no folio can be had.
    pub(super) fn swapin(&self, pages: &mut PageCache, index: u64) -> Result<Pfn> {
        let k = &*self.k;
        let (first, order) = pages.swap_order(index);
        let whole = (order > 0 && k.config.release().swaps_in_large_shmem_folios())
            .then(|| k.alloc_folio_on(crate::phys::Placement::local(), order, false).ok())
            .flatten();
        let f = match whole {
            Some(f) => f,
            None => {
                pages.split_entries(index, index + 1);
                k.alloc_folio_zeroed(0)?
            }
        };
        let first = if f.is_large() { first } else { index };
        let (e, nr) = (pages.swapped[&first], f.nr_pages());
        let dev = k.swap.as_ref().expect("a swap entry implies a device");
        for i in 0..nr {
            dev.read(&k.phys, pages.swapped.remove(&(first + i)).expect("a large entry names each page"), f.pfn + i);
            pages.insert(first + i, f.pfn + i);
        }
        pages.large.remove(&first);
        f.head().set(pg::SWAPBACKED | pg::UPTODATE | pg::DIRTY);
        f.head().link.store(self.ino, Relaxed);
        f.set_index(first);
        f.ref_add(cache_refs(f) - 1);
        k.folio_add_lru(f);
        dev.put(e, nr);
        Stats::add(&k.stats.pswpin, nr);
        if f.is_large() {
            Stats::inc(&k.stats.swpin[f.order() as usize]);
        }
        Ok(f.pfn + (index - first))
    }

    /// Swaps in every swapped-out page of `[first, first + nr)`, as
    /// `collapse_file` does with `shmem_get_folio(SGP_NOALLOC)` before it
    /// copies a range (Linux allocates the new folio first).
    pub(crate) fn swapin_range(&self, first: u64, nr: u64) -> Result<()> {
        let mut pages = self.pages.lock().unwrap();
        let swapped: Vec<u64> = pages.swapped.range(first..first + nr).map(|(&i, _)| i).collect();
        for index in swapped {
            // A large entry came back whole with an earlier page.
            if pages.swapped.contains_key(&index) {
                self.swapin(&mut pages, index)?;
            }
        }
        Ok(())
    }

    /// `shmem_delete_from_page_cache(folio, swp_to_radix_entry(swap))`: the
    /// unmapped `f` leaves the cache, which names its pages by the slots
    /// from `e` (one large entry for a large folio; the slots get a
    /// reference each: `swap_shmem_alloc`) from now on; or, with no `e` (a
    /// clean folio: `__remove_mapping`), leaves a hole. The cache's
    /// references on `f` are dropped. False, nothing done, if `f` is no
    /// longer this cache's, something but the cache, the caller's
    /// reference and the swap cache holds it, or it was written since the
    /// caller found it clean or wrote it to `e` (`PG_dirty` again: a
    /// `pwrite` or a partial hole punch changes its bytes under the
    /// cache's lock, where Linux's hold the folio lock). Checked under the
    /// cache's lock, which every lookup that takes a reference holds.
    pub(crate) fn remove_for_reclaim(&self, f: Folio, e: Option<SwpEntry>) -> bool {
        let mut pages = self.pages.lock().unwrap();
        let (index, nr) = (f.index(), f.nr_pages());
        let expected = cache_refs(f) + 1 + if e.is_some() { nr as i32 } else { 0 };
        let changed = f.head().test(pg::DIRTY);
        if pages.get(&index) != Some(&f.pfn) || f.refcount() != expected || changed {
            return false;
        }
        self.account_i_pages(index, nr, true);
        for i in index..index + nr {
            pages.remove(&i);
        }
        if let Some(e) = e {
            self.k.swap.as_ref().expect("a slot implies a device").duplicate(e, nr);
            for i in 0..nr {
                pages.swapped.insert(index + i, SwpEntry { offset: e.offset + i, ..e });
            }
            if f.is_large() {
                pages.large.insert(index, f.order());
            }
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
        pages.split_entries(first, end);
        let gone: Vec<(u64, SwpEntry)> = pages.swapped.range(first..end).map(|(&i, &e)| (i, e)).collect();
        for (index, e) in gone {
            pages.swapped.remove(&index);
            self.k.swap.as_ref().expect("a swap entry implies a device").put(e, 1);
        }
    }

    /// `shmem_partial_swap_usage`: the pages of the swap entries that
    /// `[start, end)` meets, a large entry counted whole however little of
    /// it the range covers (`xas_for_each` steps over entries, adding
    /// `1 << order` for each).
    pub fn partial_swap_usage(&self, start: u64, end: u64) -> u64 {
        let pages = self.pages.lock().unwrap();
        let mut firsts: Vec<(u64, u32)> = pages.swapped.range(start..end).map(|(&i, _)| pages.swap_order(i)).collect();
        firsts.dedup();
        firsts.iter().map(|&(_, order)| 1u64 << order).sum()
    }

    /// `shmem_swap_usage` of a VMA mapping the file's pages `[pgoff, pgoff
    /// + pages)`: every page swapped out (`info->swapped`) when it maps
    /// the file whole from its start, else [`Self::partial_swap_usage`].
    pub fn swap_usage(&self, pgoff: u64, pages: u64) -> u64 {
        let swapped = self.pages.lock().unwrap().swapped.len() as u64;
        match swapped {
            0 => 0,
            _ if pgoff == 0 && pages * PAGE_SIZE >= self.size() => swapped,
            _ => self.partial_swap_usage(pgoff, pgoff + pages),
        }
    }

    /// Every swapped-out page as (index, swap entry), in index order.
    pub fn swapped(&self) -> Vec<(u64, SwpEntry)> {
        self.pages.lock().unwrap().swapped.iter().map(|(&i, &e)| (i, e)).collect()
    }
}
