//! Dropping a byte range of a shmem file from its page cache (mm/shmem.c
//! `shmem_undo_range`, mm/truncate.c `truncate_inode_partial_folio`), for
//! truncation (the range runs to the end) and hole punches, after the
//! caller unmapped the range.
//!
//! Folios wholly inside the range leave the cache. A folio the range only
//! partly covers is marked dirty and has the covered bytes zeroed; if it is large and held by
//! the cache alone (unmapped, unpinned), it is split around the range's
//! first page and, if the range ends inside it, around the page where the
//! range ends (`try_folio_split_to_order`, a non-uniform split), and the
//! pieces the range now covers wholly leave too. A folio that cannot be
//! split stays whole, zeroed where covered.
//!
//! A hugetlbfs file's huge pages are never split: a partly covered one is
//! only zeroed (`hugetlbfs_zero_partial_page`); the reservations of the
//! huge pages the range covers wholly are given back.
//!
//! Differs from Linux: no folio lock (the cache lock is held throughout);
//! the split needs the caller to have unmapped the folio first (Linux's
//! split unmaps it itself).

use std::collections::BTreeSet;

use super::{cache_refs, Inode, Mount};
use crate::arch::{Pfn, PAGE_SIZE};
use crate::folio::Folio;
use crate::phys::pg;
use crate::rmap::folio_mapcount;
use crate::sync::atomic::Ordering::Relaxed;

impl Inode {
    /// The large folios that byte range `[offset, end)` covers only in part
    /// and that nothing but the cache and their mappings holds, so that a
    /// split may follow once they are unmapped: each as its first index
    /// and number of pages.
    pub fn splittable_partial_folios(&self, offset: u64, end: u64) -> Vec<(u64, u64)> {
        let pages = self.pages.lock().unwrap();
        let mut out = Vec::new();
        for (first, f) in self.boundary_folios(&pages, offset, end) {
            let held = cache_refs(f) + folio_mapcount(&self.k, f) as i32;
            if splittable(f) && f.refcount() == held {
                out.push((first, f.nr_pages()));
            }
        }
        out
    }

    /// `shmem_undo_range(offset, end - 1)` (`end` is `u64::MAX` for a
    /// truncation): see the module documentation. The size is not changed.
    /// The swap slots of the pages wholly inside the range are freed; a
    /// swap entry holding the first or the last byte that the range covers
    /// in part (a page, or a large entry) is read back first, within
    /// `i_size` (`shmem_get_partial_folio`), or left swapped if it cannot
    /// be; past `i_size` the part of a large entry inside the range is
    /// freed (Linux frees the whole entry before the stable fix of
    /// `shmem_free_swap`, and spins after it: see `scenarios/swap/27`).
    pub(crate) fn undo_range(&self, offset: u64, end: u64) {
        let phys = &self.k.phys;
        let mut pages = self.pages.lock().unwrap();
        let (first_whole, end_whole) = (offset.div_ceil(PAGE_SIZE), end / PAGE_SIZE);
        let last = (end != u64::MAX && end > offset).then(|| (end - 1) / PAGE_SIZE);
        for index in [Some(offset / PAGE_SIZE), last].into_iter().flatten() {
            let (first, order) = pages.swap_order(index);
            let whole = first * PAGE_SIZE >= offset && ((first + (1 << order)) * PAGE_SIZE) <= end;
            if pages.swapped.contains_key(&index) && !whole && index < self.nr_pages() {
                let _ = self.swapin(&mut pages, index);
            }
        }
        self.free_swap(&mut pages, first_whole, end_whole);
        for (first, f) in self.boundary_folios(&pages, offset, end) {
            let (start, stop) = (first * PAGE_SIZE, (first + f.nr_pages()) * PAGE_SIZE);
            let (lo, hi) = (offset.max(start), end.min(stop));
            // shmem_undo_range() marks a shmem folio it covers in part dirty
            // before zeroing the covered bytes, whatever they held.
            if !self.is_hugetlbfs() {
                f.head().set(pg::DIRTY);
            }
            // folio_zero_range() (hugetlbfs_zero_partial_page): the covered
            // bytes, page by page.
            let mut at = lo;
            while at < hi {
                let page = at / PAGE_SIZE;
                let n = hi.min((page + 1) * PAGE_SIZE) - at;
                phys.fill(f.pfn + page - first, (at % PAGE_SIZE) as usize, n as usize, 0);
                at += n;
            }
            if !splittable(f) || f.refcount() != cache_refs(f) {
                continue;
            }
            self.k.split_unmapped_folio(f, (lo - start) / PAGE_SIZE, 1);
            if hi != stop {
                let pfn = f.pfn + (hi - start) / PAGE_SIZE;
                let rest = Folio::containing(phys, pfn);
                if rest.is_large() {
                    self.k.split_unmapped_folio(rest, pfn - rest.pfn, 1);
                }
            }
        }
        let (mut whole, mut firsts) = (BTreeSet::new(), Vec::new());
        for (&i, &pfn) in pages.range(offset / PAGE_SIZE..end.div_ceil(PAGE_SIZE)) {
            let f = Folio::containing(phys, pfn);
            let first = i - (pfn - f.pfn);
            if first * PAGE_SIZE >= offset
                && (first + f.nr_pages()).saturating_mul(PAGE_SIZE) <= end
                && whole.insert(f.pfn)
            {
                firsts.push(first);
            }
        }
        pages.retain(|_, &mut p| !whole.contains(&Folio::containing(phys, p).pfn));
        let freed = whole.len() as u64;
        // The reservation map changes with the cache, under its lock, so no
        // fault sees a page gone from the cache but still in the map (as
        // the fault mutex ensures in Linux). Eviction gives back every
        // reservation (remove_inode_hugepages' truncate_op); whole huge
        // pages dropped otherwise, only theirs.
        match (self.mount, end) {
            (Mount::Hugetlbfs(_), u64::MAX) => self.hugetlb_unreserve(offset.div_ceil(PAGE_SIZE), u64::MAX, freed),
            (Mount::Hugetlbfs(_), _) => self.hugetlb_unreserve_freed(&firsts),
            _ => {}
        }
        drop(pages);
        for head in whole {
            self.remove_from_cache(head);
        }
    }

    /// The cached folios holding the first and the last byte of `[offset,
    /// end)` that the range does not cover wholly, each once, with the
    /// index of their first page.
    fn boundary_folios(
        &self,
        pages: &std::collections::BTreeMap<u64, Pfn>,
        offset: u64,
        end: u64,
    ) -> Vec<(u64, Folio<'_>)> {
        let mut out: Vec<(u64, Folio)> = Vec::new();
        let last = (end < u64::MAX).then(|| end.saturating_sub(1) / PAGE_SIZE);
        for index in [Some(offset / PAGE_SIZE), last].into_iter().flatten() {
            let Some(&pfn) = pages.get(&index) else { continue };
            let f = Folio::containing(&self.k.phys, pfn);
            let first = index - (pfn - f.pfn);
            let covered = first * PAGE_SIZE >= offset && (first + f.nr_pages()) * PAGE_SIZE <= end;
            if !covered && out.iter().all(|(_, g)| g.pfn != f.pfn) {
                out.push((first, f));
            }
        }
        out
    }

    /// `filemap_remove_folio` + `folio_put_refs`: drops the cache's reference.
    pub(super) fn remove_from_cache(&self, pfn: Pfn) {
        let f = Folio::containing(&self.k.phys, pfn);
        self.account_i_pages(f.index(), f.nr_pages(), true);
        f.head().link.store(0, Relaxed);
        self.k.folio_put_refs(f, cache_refs(f));
    }
}

/// Whether truncation may split `f`: a large folio, not a hugetlb one.
fn splittable(f: Folio) -> bool {
    f.is_large() && !f.head().test(pg::HUGETLB)
}
