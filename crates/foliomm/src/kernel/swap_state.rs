//! The swap cache seen from folios (mm/swap_state.c, mm/swapfile.c
//! `folio_alloc_swap`, `folio_free_swap`): a folio in it holds a slot per
//! page and the cache holds a reference per page on it.

use super::Kernel;
use crate::arch::{Pfn, SwpEntry};
use crate::folio::Folio;
use crate::phys::pg;
use crate::Errno;

impl Kernel {
    /// `folio_alloc_swap` (`add_to_swap` before 6.16): slots for every
    /// page of `f`, naturally aligned in one cluster, with `f` in the swap
    /// cache. ENOMEM without a swap device or a free run.
    pub fn add_to_swap(&self, f: Folio) -> Result<SwpEntry, Errno> {
        let dev = self.swap.as_ref().ok_or(Errno::ENOMEM)?;
        let e = dev.alloc(f.pfn, f.nr_pages())?;
        f.ref_add(f.nr_pages() as i32);
        f.head().set(pg::SWAPCACHE);
        Ok(e)
    }

    /// `add_to_swap_cache` for a page read in from slot `e`, swap-backed
    /// from now on (`__folio_set_swapbacked`) though not anon until mapped:
    /// false if the slot is cached already (another swap-in got there first).
    pub fn swap_cache_add(&self, f: Folio, e: SwpEntry) -> bool {
        let dev = self.swap.as_ref().expect("a swap entry implies a device");
        if !dev.cache_add(e, f.pfn) {
            return false;
        }
        f.ref_add(1);
        f.head().set(pg::SWAPCACHE | pg::SWAPBACKED);
        true
    }

    /// True if `f` is in the swap cache and has no mapping
    /// (`folio_test_swapcache` and not `folio_test_anon`, no shmem file): a
    /// swap-in read it and nothing has mapped it yet, or reclaim took a
    /// shmem folio from its file and could not free it.
    pub fn unmapped_swapcache(&self, f: Folio) -> bool {
        let h = f.head();
        h.test(pg::SWAPCACHE) && !f.test_anon() && h.link.load(crate::sync::atomic::Ordering::Relaxed) == 0
    }

    /// `folio->swap`: the first slot of `f`, if it is in the swap cache.
    pub fn folio_swap(&self, f: Folio) -> Option<SwpEntry> {
        match f.head().test(pg::SWAPCACHE) {
            true => self.swap.as_ref()?.entry_of(f.pfn),
            false => None,
        }
    }

    /// `folio_matches_swap_entry`: true if `f` is in the swap cache and
    /// its page at `page` holds slot `e`. Checked under the folio lock.
    pub fn folio_matches_swap_entry(&self, f: Folio, page: Pfn, e: SwpEntry) -> bool {
        let inside = (f.pfn..f.pfn + f.nr_pages()).contains(&page);
        inside && self.folio_swap(f).is_some_and(|s| s.offset + (page - f.pfn) == e.offset)
    }

    /// `folio_free_swap`: if `f` is in the swap cache and no swap entry
    /// names any of its slots any more, it leaves the cache
    /// ([`Kernel::delete_from_swap_cache`]) and is dirtied. Returns true if it left. The
    /// caller holds a reference of its own.
    pub fn folio_free_swap(&self, f: Folio) -> bool {
        let (Some(e), Some(dev)) = (self.folio_swap(f), self.swap.as_ref()) else { return false };
        let named = (0..f.nr_pages()).any(|i| dev.count(SwpEntry { offset: e.offset + i, ..e }) > 0);
        if named {
            return false;
        }
        self.delete_from_swap_cache(f);
        // Its bytes are now only in memory: never dropped as clean.
        f.head().set(pg::DIRTY);
        true
    }

    /// `delete_from_swap_cache` + `put_swap_folio`: `f` leaves the swap
    /// cache; slots no swap entry names are freed, and the cache's
    /// references are dropped (which frees `f` if they were the last).
    pub fn delete_from_swap_cache(&self, f: Folio) {
        if self.remove_from_swap_cache(f) {
            self.folio_put_refs(f, f.nr_pages() as i32);
        }
    }

    /// `__delete_from_swap_cache` of a folio whose references the caller
    /// froze (`__remove_mapping`): `f` leaves the swap cache, its slots
    /// no swap entry names are freed; the references are the caller's to
    /// settle. Returns false if it was not in the cache.
    pub fn remove_from_swap_cache(&self, f: Folio) -> bool {
        let (Some(e), Some(dev)) = (self.folio_swap(f), self.swap.as_ref()) else { return false };
        for i in 0..f.nr_pages() {
            dev.cache_del(SwpEntry { offset: e.offset + i, ..e });
        }
        f.head().clear(pg::SWAPCACHE);
        true
    }
}
