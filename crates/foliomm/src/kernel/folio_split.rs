//! Splitting a large folio that nothing maps (mm/huge_memory.c
//! `__split_unmapped_folio` with `uniform_split == false`, as `folio_split`
//! does it for truncation): the folio is halved again and again around one
//! page until that page is a folio of its own, each half that does not
//! hold it becoming a folio of that order (a "buddy" split). Splitting an
//! order-9 folio at page 5 leaves folios of orders 2, 0, 0 (page 5), 1, 3,
//! 4, 5, 6, 7 and 8.
//!
//! Before 6.15 (the designs before `mm-id`) truncation splits uniformly,
//! every page a folio of its own ([`crate::release::KernelVersion::splits_folios_in_buddies`]).
//!
//! A mapped anon folio is split by its caller around this
//! ([`crate::memory::split`]).
//!
//! Differs from Linux: only unmapped folios held by nothing but the page
//! cache or their caller are split (`can_split_folio` with no extra pins, and the caller
//! has unmapped the folio, which `unmap_folio` does in Linux); no memcg, no
//! swap cache.

use crate::arch::Pfn;
use crate::folio::Folio;
use crate::phys::pg;
use crate::sync::atomic::Ordering::{Relaxed, Release};

use super::{Kernel, Stats};

impl Kernel {
    /// Splits the large, unmapped `f`, whose `refs_per_page` references per
    /// page are its only ones (the page cache's), so that page `at` of it
    /// is a folio of order 0; returns the new folios as (head, order) in
    /// address order. Each keeps the flags and mapping of `f` and its
    /// share of the references. Panics if `f` is small or still mapped: a
    /// caller's bug, not a state the kernel reaches.
    pub fn split_unmapped_folio(&self, f: Folio, at: u64, refs_per_page: i32) -> Vec<(Pfn, u32)> {
        let uniform = !self.config.release().splits_folios_in_buddies();
        self.split_pieces(f, at, 0, uniform, refs_per_page)
    }

    /// Splits the large, unmapped `f` into order-0 folios (`split_folio`,
    /// `uniform_split`), each with `refs_per_page` references; returns
    /// their frames.
    pub fn split_unmapped_folio_to_pages(&self, f: Folio, refs_per_page: i32) -> Vec<Pfn> {
        self.split_unmapped_folio_to_order(f, 0, None, refs_per_page).into_iter().map(|(pfn, _)| pfn).collect()
    }

    /// Splits the large, unmapped `f`, below its own order, into folios of
    /// `order` (`split_folio_to_order`, `uniform_split`) or, with `at`,
    /// halves it again and again until page `at` is in a folio of `order`,
    /// every other half a folio of its own (`folio_split`); each piece gets
    /// `refs_per_page` references per page. Returns them as (head, order).
    pub fn split_unmapped_folio_to_order(
        &self,
        f: Folio,
        order: u32,
        at: Option<u64>,
        refs_per_page: i32,
    ) -> Vec<(Pfn, u32)> {
        self.split_pieces(f, at.unwrap_or(0), order, at.is_none(), refs_per_page)
    }

    /// The split itself: uniform (every piece a folio of order `to`) or
    /// around page `at` (down to `to` there).
    fn split_pieces(&self, f: Folio, at: u64, to: u32, uniform: bool, refs_per_page: i32) -> Vec<(Pfn, u32)> {
        let order = f.order();
        assert!(order > to && at < f.nr_pages(), "split of folio {:#x} at page {at}", f.pfn);
        self.design.forget_untracked(f);
        let bad = self.design.check_freeable(f);
        assert!(bad.is_empty(), "split of mapped folio {:#x}: {}", f.pfn, bad.join("; "));
        let kept = pg::ANON | pg::SWAPBACKED | pg::DIRTY | pg::UPTODATE | pg::REFERENCED | pg::LOCKED;
        let keep = f.head().flags.load(Relaxed) & kept;
        let (mapping, index, on_lru) = (f.head().link.load(Relaxed), f.index(), f.head().test(pg::LRU));
        self.deferred_split_remove(f);
        self.phys.folios_changed(f.pfn, order);
        Stats::inc(&self.stats.split[order as usize]);
        if order == crate::arch::PMD_ORDER {
            Stats::inc(&self.stats.thp_split_page);
        }
        let mut pieces = Vec::new();
        let (mut first, mut o) = (f.pfn, order);
        if uniform {
            // split_folio (and truncation before 6.15): every piece a folio.
            let rest = (f.pfn + (1 << to)..f.pfn + f.nr_pages()).step_by(1 << to);
            (pieces, o) = (rest.map(|p| (p, to)).collect(), to);
        }
        // Orders a piece may not have are skipped: 1 for anon
        // (`__split_unmapped_folio`), those below the design's smallest.
        let min = self.design.min_large_order().max(if keep & pg::ANON != 0 { 2 } else { 1 });
        let mut size = o;
        while o > to {
            o -= 1;
            if o > 0 && o < min && o > to {
                continue;
            }
            // The piece holding page `at` is split into folios of order
            // `o`; all but the one holding `at` are done.
            let around = first + ((f.pfn + at - first) >> o << o);
            let done = (first..first + (1 << size)).step_by(1 << o).filter(|&p| p != around);
            pieces.extend(done.map(|p| (p, o)));
            (first, size) = (around, o);
        }
        pieces.push((first, to));
        pieces.sort_unstable();
        let lru = on_lru.then(|| self.lru.lock_for_split(f));
        let mapped = super::page_alloc::clear_descriptors(f);
        assert!(mapped.is_empty(), "split of mapped folio {:#x}: {}", f.pfn, mapped.join("; "));
        for &(pfn, o) in &pieces {
            let piece = self.prep_compound(pfn, o);
            piece.head().set(keep);
            piece.head().link.store(mapping, Relaxed);
            piece.set_index(index + (pfn - f.pfn));
        }
        // On the LRU before anyone can take a reference (`lru_add_split_folio`
        // under the LRU lock, the references frozen meanwhile).
        if let Some(lru) = lru {
            lru.split(&self.phys, &pieces);
        }
        for &(pfn, o) in &pieces {
            self.phys.page(pfn).refcount.store(refs_per_page << o, Release);
        }
        pieces
    }
}
