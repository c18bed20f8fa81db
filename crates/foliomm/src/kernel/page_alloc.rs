//! Folio and page-table allocation over the buddy allocator, with the
//! design's fields set up and checked: `folio_alloc` + `prep_compound_page`,
//! `folio_put_refs` → `free_frozen_pages` with the `free_tail_page_prepare`
//! "bad page" checks, `pte_alloc_one` / `pte_free`.

use crate::arch::Pfn;
use crate::folio::{Folio, GUP_PIN_COUNTING_BIAS, PINCOUNT_WORD};
use crate::phys::{pg, MigrateType, Page, Placement};
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::cacheline::{self, Structure};
use crate::Errno;

use super::{Kernel, Stats};

impl Kernel {
    /// Allocates a folio of `2^order` pages with refcount 1, mapcounts reset
    /// (`folio_alloc` + `prep_compound_page`); the bytes are not zeroed.
    pub fn alloc_folio(&self, order: u32) -> Result<Folio<'_>, Errno> {
        self.phys.alloc_pages(order).map(|pfn| self.prep_folio(pfn, order))
    }

    /// [`Kernel::alloc_folio`] on the first node of `place` that has a free
    /// block (with reclaim: no watermark test, unlike [`Kernel::alloc_folio_on`]).
    pub(super) fn alloc_folio_placed(&self, place: Placement, order: u32) -> Result<Folio<'_>, Errno> {
        self.phys.alloc_pages_on(place, order, MigrateType::Movable).map(|pfn| self.prep_folio(pfn, order))
    }

    /// [`Kernel::alloc_folio`] with the bytes zeroed (`vma_alloc_zeroed_movable_folio`).
    pub fn alloc_folio_zeroed(&self, order: u32) -> Result<Folio<'_>, Errno> {
        self.phys.alloc_pages_zeroed(order).map(|pfn| self.prep_folio(pfn, order))
    }

    /// A user folio of `2^order` pages, zeroed or not, where `place`
    /// allows (`vma_alloc_folio` / `__folio_alloc` with a preferred node and
    /// nodemask). A large folio is taken without reclaim (`GFP_TRANSHUGE_LIGHT`,
    /// as THP and mTHP faults, khugepaged and migration take theirs): ENOMEM,
    /// for the caller to fall back to a smaller order, if it would leave
    /// the allowed nodes fewer free frames than their share of the low
    /// watermark (`zone_watermark_ok` at `WMARK_LOW` in the fast path),
    /// which keeps the last frames for page tables and small folios.
    pub fn alloc_folio_on(&self, place: Placement, order: u32, zeroed: bool) -> Result<Folio<'_>, Errno> {
        let phys = &self.phys;
        if order > 0 {
            let allowed = || (0..phys.nr_nodes()).filter(|&n| place.allowed.contains(n));
            let free: u64 = allowed().map(|n| phys.nr_free_node(n)).sum();
            let mark = self.low_watermark() * allowed().count() as u64 / phys.nr_nodes() as u64;
            if free < mark + (1 << order) {
                return Err(Errno::ENOMEM);
            }
        }
        let pfn = match zeroed {
            true => phys.alloc_pages_zeroed_on(place, order, MigrateType::Movable),
            false => phys.alloc_pages_on(place, order, MigrateType::Movable),
        }?;
        Ok(self.prep_folio(pfn, order))
    }

    /// The low watermark in frames (`min_free_kbytes` = `int_sqrt(16 * KiB
    /// of memory)`, clamped to 128 KiB .. 256 MiB, and a quarter more), under
    /// which kswapd starts to reclaim.
    pub fn low_watermark(&self) -> u64 {
        let kib = self.phys.nr_frames() * (crate::arch::PAGE_SIZE >> 10);
        let min_kib = (16 * kib).isqrt().clamp(128, 256 << 10);
        (min_kib + min_kib / 4) / (crate::arch::PAGE_SIZE >> 10)
    }

    fn prep_folio(&self, pfn: Pfn, order: u32) -> Folio<'_> {
        let f = self.prep_compound(pfn, order);
        f.head().refcount.store(1, Relaxed);
        // Gigantic folios (1 GiB hugetlb pages) are not counted per order.
        if let Some(count) = self.stats.folio_alloc.get(order as usize) {
            Stats::inc(count);
        }
        f
    }

    /// `prep_compound_page`: makes `2^order` frames from `pfn` one folio
    /// with refcount 0, no flags but the compound ones, mapcounts reset.
    pub(super) fn prep_compound(&self, pfn: Pfn, order: u32) -> Folio<'_> {
        let nr = 1u64 << order;
        for i in 0..nr {
            let p = self.phys.page(pfn + i);
            cacheline::write(Structure::Folio, p);
            p.flags.store(
                if order == 0 {
                    0
                } else if i == 0 {
                    pg::HEAD
                } else {
                    pg::TAIL
                },
                Relaxed,
            );
            p.compound.store(if i == 0 { 0 } else { pfn }, Relaxed);
            p.mapcount.store(-1, Relaxed);
            p.refcount.store(0, Relaxed);
            p.link.store(0, Relaxed);
        }
        let f = Folio::from_head(&self.phys, pfn);
        if order > 0 {
            f.page(1).flags.fetch_or((order as u64) << pg::ORDER_SHIFT, Relaxed);
            self.design.prep(f);
        }
        f
    }

    /// Drops `n` references; frees the folio when they were the last
    /// (`folio_put_refs` → `free_frozen_pages`).
    pub fn folio_put_refs(&self, f: Folio, n: i32) {
        if f.put_refs(n) {
            self.free_folio(f);
        }
    }

    /// Drops one FOLL_PIN reference (`gup_put_folio`); may free the folio.
    pub fn unpin_folio(&self, f: Folio) {
        if f.is_large() {
            f.page(1).w[PINCOUNT_WORD].fetch_sub(1, Relaxed);
            self.folio_put_refs(f, 1);
        } else {
            self.folio_put_refs(f, GUP_PIN_COUNTING_BIAS);
        }
    }

    /// Frees `f`, whose references its caller froze at 0
    /// (`folio_ref_freeze` in `__remove_mapping`, then `free_unref_folios`).
    pub fn free_frozen_folio(&self, f: Folio) {
        debug_assert_eq!(f.refcount(), 0);
        self.free_folio(f)
    }

    pub(super) fn free_folio(&self, f: Folio) {
        let order = f.order();
        if order > 0 {
            self.design.forget_untracked(f);
        }
        let mut bad = if order > 0 { self.design.check_freeable(f) } else { Vec::new() };
        let hugetlb = f.head().test(pg::HUGETLB);
        if hugetlb {
            bad.extend((0..f.nr_pages()).filter_map(|i| mapped_page(f, i)));
        } else {
            self.lru.del(f);
            self.deferred_split_remove(f);
            bad.extend(clear_descriptors(f));
        }
        if !bad.is_empty() {
            self.bad_pages.lock().unwrap().push((f.pfn, bad.join("; ")));
        }
        if hugetlb {
            return self.free_huge_folio(f);
        }
        if let Some(count) = self.stats.folio_free.get(order as usize) {
            Stats::inc(count);
        }
        self.phys.free_pages(f.pfn, order);
    }

    /// Allocates a zeroed page-table page (`pte_alloc_one` and friends).
    pub fn alloc_table(&self) -> Result<Pfn, Errno> {
        let pfn = self.phys.alloc_words(MigrateType::Unmovable)?;
        let p = self.phys.page(pfn);
        p.flags.store(pg::TABLE, Relaxed);
        p.refcount.store(1, Relaxed);
        p.mapcount.store(-1, Relaxed);
        Stats::inc(&self.stats.pgtable_alloc);
        Ok(pfn)
    }

    /// Frees a page-table page.
    pub fn free_table(&self, pfn: Pfn) {
        let p = self.phys.page(pfn);
        debug_assert!(p.test(pg::TABLE));
        p.flags.store(0, Relaxed);
        p.refcount.store(0, Relaxed);
        p.mapcount.store(0, Relaxed);
        Stats::inc(&self.stats.pgtable_free);
        self.phys.free_pages_as(pfn, 0, MigrateType::Unmovable);
    }
}

/// Page `i` of `f` described as a bad page if its `_mapcount` is not -1
/// (a page table still maps it).
fn mapped_page(f: Folio, i: u64) -> Option<String> {
    unmapped_or_bad(f.page(i), i)
}

/// None if `p` (page `i` of its folio) is unmapped, else what is wrong.
fn unmapped_or_bad(p: &Page, i: u64) -> Option<String> {
    let m = p.mapcount.load(Relaxed);
    (m != -1).then(|| format!("page {i} _mapcount is {m}, expected -1"))
}

/// Resets every descriptor of `f` to what a free frame has, in one pass
/// that checks each page's `_mapcount` as `free_tail_page_prepare` and
/// `free_page_is_bad` do; returns the bad pages found.
pub(super) fn clear_descriptors(f: Folio) -> Vec<String> {
    let mut bad = Vec::new();
    for (i, p) in f.phys().pages_ahead(f.pfn..f.pfn + f.nr_pages()).enumerate() {
        bad.extend(unmapped_or_bad(p, i as u64));
        p.flags.store(0, Relaxed);
        p.mapcount.store(0, Relaxed);
        p.compound.store(0, Relaxed);
        p.link.store(0, Relaxed);
        for w in &p.w {
            w.store(0, Relaxed);
        }
        p.ids.store(0, Relaxed);
    }
    bad
}
