//! hugetlbfs files (fs/hugetlbfs/inode.c, mm/hugetlb.c): an [`Inode`] on
//! [`Mount::Hugetlbfs`] whose page cache holds huge folios (2 MiB or
//! 1 GiB, the mount's page size) of the huge page pool of that size, with
//! the file's reservation map (`resv_map`).
//!
//! A shared mapping reserves, at mmap, every huge page of its range the map
//! does not already hold (`hugetlb_reserve_pages`); a fault allocating a
//! page the map holds consumes that promise, and any fault adds its page to
//! the map. Truncation and hole punches drop the huge pages they cover
//! wholly; truncation gives back the promises of those never instantiated
//! too (`hugetlb_unreserve_pages`), a hole punch keeps them.
//!
//! A private mapping (of a file, or anonymous: `MAP_PRIVATE|MAP_HUGETLB`,
//! which has a file of its own) reserves in a map of its own instead
//! ([`super::PrivateResv`]).
//!
//! Differs from Linux: no subpool (`size=` mount option) accounting.

use super::{Inode, Mount};
use crate::arch::PAGE_SIZE;
use crate::folio::Folio;
use crate::kernel::HugeSize;
use crate::phys::{pg, Placement};
use crate::sync::atomic::Ordering::Relaxed;
use crate::{Errno, Result};

impl Inode {
    /// The size of the file's pages if it is a hugetlbfs file.
    pub fn huge_size(&self) -> Option<HugeSize> {
        match self.mount {
            Mount::Hugetlbfs(size) => Some(size),
            _ => None,
        }
    }

    /// Base pages in one of this hugetlbfs file's pages.
    fn hpage_pages(&self) -> u64 {
        self.huge_size().expect("a hugetlbfs file").pages()
    }

    /// `hugetlb_reserve_pages` for a shared mapping of file pages
    /// `first..last` (huge-page aligned): promises every huge page of the
    /// range not yet in the reservation map. ENOMEM if the pool cannot.
    pub fn hugetlb_reserve(&self, first: u64, last: u64) -> Result<()> {
        let mut map = self.resv_map.lock().unwrap();
        let step = self.hpage_pages() as usize;
        let missing: Vec<u64> = (first..last).step_by(step).filter(|i| !map.contains(i)).collect();
        self.k.hugetlb_reserve(self.huge_size().expect("a hugetlbfs file"), missing.len() as u64)?;
        map.extend(missing);
        Ok(())
    }

    /// `hugetlb_no_page`'s page-cache part for a shared mapping: the huge
    /// folio holding page `index`, with a reference for the caller; a new
    /// one (from the pool, a reserved page if the map promised one) when
    /// the file has none there, zeroed before it enters the cache and
    /// outside the cache's lock (`folio_zero_user`, then
    /// `hugetlb_add_to_page_cache`). SIGBUS past the end of the file or
    /// when the pool has no page to give. The caller holds the page's fault
    /// mutex, so no other fault or fallocate adds the page meanwhile. As in
    /// Linux the end is not read again: a truncation that `i_mmap_rwsem`
    /// does not keep out (the hugetlb VMA lock does not, nor `no-lock`)
    /// may leave the page past it.
    pub fn hugetlb_get_folio(&self, index: u64, place: Placement) -> Result<Folio<'_>> {
        let (size, nr) = (self.huge_size().expect("a hugetlbfs file"), self.hpage_pages());
        let first = index & !(nr - 1);
        {
            let pages = self.pages.lock().unwrap();
            if let Some(&pfn) = pages.get(&first) {
                let f = Folio::from_head(&self.k.phys, pfn);
                f.ref_add(1);
                return Ok(f);
            }
            if index >= self.nr_pages() {
                return Err(Errno::SIGBUS);
            }
        }
        // alloc_hugetlb_folio: asks the map for a promise
        // (`vma_needs_reservation`), takes a page from the pool (using the
        // promise if there was one), then records the page in the map
        // (`vma_commit_reservation`), each step under the map's lock only.
        let promised = self.resv_map.lock().unwrap().contains(&first);
        let f = self.k.alloc_hugetlb_folio(size, promised, place).map_err(|_| Errno::SIGBUS)?;
        let added = self.resv_map.lock().unwrap().insert(first);
        if !promised && !added {
            // An mmap promised this page meanwhile (hugetlb_reserve_pages),
            // but it is taken: that promise goes back.
            self.k.hugetlb_unreserve(size, 1);
        }
        // A truncation that removed the page's entry between the two steps
        // (it gave the used promise back as unused) finds it again here:
        // the entry comes back past the end, and when the file goes its
        // promise is given back once more, for good (a leak of one, which
        // Linux has too: foliomm-host's hugetlb_truncate_race test).
        self.k.zero_huge_folio(f);
        let mut pages = self.pages.lock().unwrap();
        debug_assert!(!pages.contains_key(&first), "page {first} added twice: its fault mutex was not held");
        f.head().set(pg::UPTODATE);
        f.head().link.store(self.ino, Relaxed);
        for i in 0..nr {
            pages.insert(first + i, f.pfn + i);
        }
        // The cache's reference, and the caller's.
        f.ref_add(1);
        Ok(f)
    }

    /// `hugetlb_unreserve_pages` after `freed` huge pages of file pages
    /// `first..last` left the cache: the huge pages wholly inside leave the
    /// reservation map, and the promises of those never instantiated go
    /// back to the pool (`chg - freed`, as Linux counts them).
    ///
    /// Linux's count is wrong when a truncation races a fault that read
    /// the old size (6.1+: `hugetlb_vmdelete_list` skips the VMA whose lock
    /// the fault holds): the fault has used its page's promise but not yet
    /// put the page in the cache, so the truncation gives that promise back
    /// as well, and the page stays cached past the end. When the file goes,
    /// that page is freed without an entry in the map (`chg < freed`), and
    /// `hugetlb_acct_memory` promises the difference again, which puts the
    /// count right, unless the fault put the page's entry back (see
    /// [`Inode::hugetlb_get_folio`]). The host shows both.
    pub(crate) fn hugetlb_unreserve(&self, first: u64, last: u64, freed: u64) {
        let (size, nr) = (self.huge_size().expect("a hugetlbfs file"), self.hpage_pages());
        let mut map = self.resv_map.lock().unwrap();
        let gone: Vec<u64> = map.range(first..).take_while(|&&i| i.saturating_add(nr) <= last).copied().collect();
        for i in &gone {
            map.remove(i);
        }
        let chg = gone.len() as u64;
        match chg.checked_sub(freed) {
            Some(unused) => self.k.hugetlb_unreserve(size, unused),
            // Linux ignores hugetlb_acct_memory's failure here.
            None => drop(self.k.hugetlb_reserve(size, freed - chg)),
        }
    }

    /// `hugetlbfs_fallocate`: every huge page `[offset, end)` touches is
    /// instantiated from the pool, each under its fault mutex (a promised one where the map promised
    /// it); without `keep_size` the size covers the range. ENOMEM when the
    /// pool runs out (Linux: ENOSPC); the pages added before stay.
    pub(super) fn hugetlb_fallocate(&self, offset: u64, end: u64, keep_size: bool) -> Result<()> {
        let _inode_lock = self.i_rwsem.lock().unwrap();
        let nr = self.hpage_pages();
        if !keep_size && end > self.size() {
            self.set_size(end.next_multiple_of(nr * PAGE_SIZE))?;
        }
        let last = end.div_ceil(PAGE_SIZE).min(self.nr_pages());
        for index in (offset / PAGE_SIZE / nr * nr..last).step_by(nr as usize) {
            let mutex = self.k.hugetlb_fault_mutex(self.ino, index);
            let _mutex = mutex.lock().unwrap();
            let f = self.hugetlb_get_folio(index, Placement::local()).map_err(|_| Errno::ENOMEM)?;
            self.k.folio_put_refs(f, 1);
        }
        Ok(())
    }

    /// The huge pages at `firsts` (their first page indexes) left the
    /// cache by a hole punch: each gives back its entry with itself
    /// (`hugetlb_unreserve_pages(index, index + 1, 1)` per page), which
    /// changes no count unless the page had no entry (one a truncation
    /// missed), when its promise is made again.
    pub(crate) fn hugetlb_unreserve_freed(&self, firsts: &[u64]) {
        let nr = self.hpage_pages();
        firsts.iter().for_each(|&first| self.hugetlb_unreserve(first, first + nr, 1));
    }

    /// `remove_inode_single_folio`'s removal of the huge page at `first`
    /// (the caller holds its fault mutex and unmapped it): it leaves the
    /// cache and the reservation map stays as it is. False if the cache
    /// has no page there.
    pub fn remove_huge_page(&self, first: u64) -> bool {
        let nr = self.hpage_pages();
        let pfn = {
            let mut pages = self.pages.lock().unwrap();
            let Some(&pfn) = pages.get(&first) else { return false };
            for i in first..first + nr {
                pages.remove(&i);
            }
            pfn
        };
        self.remove_from_cache(pfn);
        true
    }

    /// The first page index of every huge page the cache holds wholly
    /// inside `[offset, end)`.
    pub fn huge_pages_in(&self, offset: u64, end: u64) -> Vec<u64> {
        let nr = self.hpage_pages();
        let pages = self.pages.lock().unwrap();
        let firsts = pages.range(offset.div_ceil(crate::arch::PAGE_SIZE)..end.div_ceil(crate::arch::PAGE_SIZE));
        firsts
            .map(|(&i, _)| i)
            .filter(|&i| i % nr == 0 && (i + nr).saturating_mul(crate::arch::PAGE_SIZE) <= end)
            .collect()
    }

    /// Whether a page table maps the huge page at `first` (`folio_mapped`);
    /// false if the cache has none there.
    pub fn huge_page_mapped(&self, first: u64) -> bool {
        // Under the cache's lock, which a migration holds while it moves the
        // page's mappings and its entry together.
        let pages = self.pages.lock().unwrap();
        let pfn = pages.get(&first).copied();
        pfn.is_some_and(|p| crate::rmap::folio_mapcount(&self.k, Folio::from_head(&self.k.phys, p)) > 0)
    }

    /// Whether the file is a hugetlbfs file.
    pub fn is_hugetlbfs(&self) -> bool {
        self.huge_size().is_some()
    }

    /// The unit the file's offsets and sizes must be multiples of: its
    /// huge page size on hugetlbfs, else a base page.
    pub fn page_unit(&self) -> u64 {
        self.huge_size().map_or(PAGE_SIZE, HugeSize::bytes)
    }
}
