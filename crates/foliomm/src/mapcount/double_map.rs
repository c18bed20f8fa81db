//! Linux 6.1's `PG_double_map` (include/linux/page-flags.h; mm/huge_memory.c
//! `__split_huge_pmd_locked`; mm/rmap.c `page_remove_anon_compound_rmap`;
//! mm/util.c `__page_mapcount`, `folio_mapcount`): while an anon THP is
//! mapped by PMDs and by PTEs at once, every page's `_mapcount` is raised by
//! one, so that a PTE map or unmap tells from its page's count alone whether
//! the page is newly mapped or unmapped, and the last PMD unmap looks at the
//! pages only when the flag is set. The `subpage` design; 6.2 replaced it.
//! 6.1 sets the flag on a file THP too, where nothing reads it; foliomm
//! keeps it for anon THPs only.
//!
//! Differs from Linux where a PMD and PTEs come to map a folio without a
//! split, which only migration's restore does: foliomm sets the flag then
//! as a split would; 6.1 does not, and counts those pages in
//! `NR_ANON_MAPPED` twice.

use super::eras::PageMapcounts;
use super::fields::{field, w};
use super::page_mapcounts::is_hugetlb;
use super::{Cost, MapcountDesign};
use crate::folio::Folio;
use crate::phys::pg;
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::cacheline::{self, Structure};

impl PageMapcounts {
    /// Whether `f`'s counts follow the DoubleMap rules: an anon THP that is
    /// not hugetlb, under a design that keeps the flag.
    pub(super) fn double_maps(&self, f: Folio) -> bool {
        self.f.double_map && f.test_anon() && !is_hugetlb(f)
    }

    /// `__split_huge_pmd_locked`'s own count updates for one PMD of an
    /// anon THP (6.1 calls no rmap function there): every page's count rises
    /// for its new PTE; while other PMDs map the folio the flag is set and
    /// every count raised once more; the PMD's count drops, and with the
    /// last PMD the flag goes and every count drops again. The pages stay
    /// mapped: nothing for `NR_ANON_MAPPED`. Returns what it cost.
    pub(super) fn split_pmd_counts(&self, f: Folio) -> Cost {
        let mut cost = self.raise_every_page(f);
        if self.entire_mapcount(f) > 1 {
            cost += self.set_double_map(f);
        }
        cost.rmw += 1;
        if w(f, field::ENTIRE).fetch_sub(1, Relaxed) == 0 {
            cost += self.clear_double_map(f).map_or_else(Cost::default, |(_, c)| c);
        }
        cost
    }

    /// Sets the flag and raises every page's count, unless it was set
    /// (`TestSetPageDoubleMap`); returns what it cost.
    pub(super) fn set_double_map(&self, f: Folio) -> Cost {
        if f.page(1).flags.fetch_or(pg::DOUBLE_MAP, Relaxed) & pg::DOUBLE_MAP != 0 {
            return Cost { rmw: 1, ..Cost::default() };
        }
        let mut cost = self.raise_every_page(f);
        cost.rmw += 1;
        cost
    }

    /// Clears the flag if set (`TestClearPageDoubleMap`) and lowers every
    /// page's count; returns the pages whose count fell below zero (no PTE
    /// maps them) and what it cost, or `None` when the flag was clear.
    pub(super) fn clear_double_map(&self, f: Folio) -> Option<(u64, Cost)> {
        if f.page(1).flags.fetch_and(!pg::DOUBLE_MAP, Relaxed) & pg::DOUBLE_MAP == 0 {
            return None;
        }
        let unmapped = (0..f.nr_pages()).filter(|&i| f.page(i).mapcount.fetch_sub(1, Relaxed) == 0).count();
        let mut cost = self.every_page_cost(f);
        cost.rmw += 1;
        Some((unmapped as u64, cost))
    }

    /// 1 while the flag is set on `f` (every page's count raised by one),
    /// else 0.
    pub(super) fn double_map_bias(&self, f: Folio) -> i32 {
        (self.double_maps(f) && f.page(1).test(pg::DOUBLE_MAP)) as i32
    }

    /// Raises every page's `_mapcount` by one; returns what it cost.
    fn raise_every_page(&self, f: Folio) -> Cost {
        (0..f.nr_pages()).for_each(|i| {
            f.page(i).mapcount.fetch_add(1, Relaxed);
        });
        self.every_page_cost(f)
    }

    /// One atomic and one memmap line per page, the lines written on
    /// simulated CPUs.
    fn every_page_cost(&self, f: Folio) -> Cost {
        if cacheline::accounting() {
            (0..f.nr_pages()).for_each(|p| cacheline::write(Structure::Folio, f.page(p)));
        }
        Cost { rmw: f.nr_pages(), lines: f.nr_pages(), ..Cost::default() }
    }
}

impl PageMapcounts {
    /// Of the `newly` pages whose count a PTE map raised from -1, those
    /// newly mapped: all, unless a PMD maps the folio without the flag (a
    /// migration restoring a PTE after the PMD), which sets it and maps
    /// none anew, adding its cost to `cost`. A read of the PMD count 6.1
    /// does not make, left uncounted.
    pub(super) fn newly_beside_pmd(&self, f: Folio, newly: u64, cost: &mut Cost) -> u64 {
        if newly == 0 || self.double_map_bias(f) == 1 || self.entire_mapcount(f) == 0 {
            return newly;
        }
        *cost += self.set_double_map(f);
        0
    }
}
