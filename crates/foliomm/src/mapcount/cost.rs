//! What each rmap operation costs a design, as its kernel code performs it:
//! atomic read-modify-writes, lock acquisitions and spins, and memmap cache
//! lines (seed 000's accounting of "4..9 additional atomic RMW operations").

use super::eras::{PageMapcounts, Total};
use super::fields::{field, w};
use super::large_mapcount::Entered;
use super::{Cost, Level};
use crate::folio::Folio;
use crate::sync::cacheline::{self, Structure};

impl PageMapcounts {
    /// What an add or remove of `nr` pages (or one PMD) from `first` cost,
    /// counted as the kernel's code for the design performs it; `entered`
    /// says how the large-mapcount update got in, `lock_spins` what the
    /// compound lock cost to take.
    /// Inlined: returned through memory, the four counters cost a store-forwarding stall per call.
    #[inline(always)]
    pub(super) fn cost(&self, f: Folio, first: u64, nr: u64, level: Level, entered: Entered, lock_spins: u64) -> Cost {
        let pte = level == Level::Pte;
        let mut c = Cost { spins: lock_spins + entered.spins, lost: entered.lost as u64, ..Cost::default() };
        // Per-page _mapcount (PTE) or _entire_mapcount (PMD), and
        // _nr_pages_mapped: plain stores for seed 000's exclusive writer
        // once they are under the seqcount, and under seed 003's lock.
        if !entered.plain_pages && !self.takes_compound_lock() {
            // Without per-page counts a PTE update touches none of them.
            c.rmw += match (pte, self.f.page_mapcounts) {
                (true, true) => nr,
                (true, false) => 0,
                (false, _) => 1,
            };
            if self.f.nr_pages_mapped {
                c.rmw += 1;
            }
        }
        if self.takes_compound_lock() {
            c.rmw += 1;
            c.locks += 1;
        }
        match self.f.total {
            Total::Ptes if pte && !self.takes_compound_lock() => c.rmw += 1,
            Total::All if self.f.mm_ids => {
                // The bit lock is the only atomic; slots update under it.
                c.rmw += 1;
                c.locks += 1;
            }
            Total::All if self.tracks(f) => {
                c.locks += 1;
                // Entering (1 RMW, 2 after a lost race) and leaving the
                // seqcount (the seed's 2 RMWs); the mapcount and each sum
                // changed are plain when alone, atomic otherwise.
                // Merged, the mapcount changes in the leaving RMW.
                let mapcount_rmw = !self.merges() as u64;
                c.rmw += entered.rmw + 1 + if entered.exclusive { 0 } else { mapcount_rmw + entered.sums };
            }
            Total::All => c.rmw += 1,
            _ => {}
        }
        let lines = self.touched_pages(f, first, nr, level).count() as u64;
        c.lines = lines;
        c
    }
}

impl PageMapcounts {
    /// The descriptors (memmap cache lines) an add or remove of `nr` pages
    /// (or one PMD) from `first` touches: the pages whose `_mapcount`
    /// changes, the second page (its fields), and for rmap-id the pages of
    /// the sums. A PMD map of a file folio that also counts in every page
    /// ([`PageMapcounts::file_pmd_extra`]) is not among them.
    pub(super) fn touched_pages(&self, f: Folio, first: u64, nr: u64, level: Level) -> impl Iterator<Item = u64> {
        let pte = level == Level::Pte;
        let touches_second = !pte || self.f.nr_pages_mapped || self.f.total != Total::None || self.seed_003();
        let per_page = self.f.page_mapcounts;
        let in_range = move |p: u64| pte && per_page && first <= p && p < first + nr;
        let sums = self.sum_pages(f, level);
        // Without per-page counts only the folio's own fields change.
        let pages = if pte && self.f.page_mapcounts { first..first + nr } else { 0..0 };
        let second = (touches_second && !in_range(1)).then_some(1);
        pages.chain(second).chain(sums.filter(move |&p| !in_range(p)))
    }

    /// The pages from 2 on that hold sums an update at `level` changes
    /// (none without sums, or for a PMD left out of them).
    fn sum_pages(&self, f: Folio, level: Level) -> std::ops::Range<u64> {
        let last =
            if self.tracks(f) && !self.skips_entire(level) { self.last_sum_page(f, self.sum_words(f)) } else { 1 };
        2..last + 1
    }

    /// Accounts the writes of an add or remove to its descriptors' lines
    /// ([`cacheline`]), when accounting: those of [`Self::touched_pages`],
    /// and every page's for a PMD map of a file folio counted in every
    /// page (`subpage`). A shared writer's 128-bit exchange (stage
    /// `all-wide`, unless `plain`) reads each pair's line before it writes
    /// it.
    pub(super) fn touch(&self, f: Folio, first: u64, nr: u64, level: Level, plain: bool) {
        if cacheline::accounting() {
            if self.wide(f) && !plain {
                self.sum_pages(f, level).for_each(|p| cacheline::read(Structure::Folio, f.page(p)));
            }
            let every = level == Level::Pmd && self.pmd_in_pages(f);
            let extra = if every { 0..f.nr_pages() } else { 0..0 };
            let pages = self.touched_pages(f, first, nr, level).filter(|&p| !every || p >= f.nr_pages());
            pages.chain(extra).for_each(|p| cacheline::write(Structure::Folio, f.page(p)));
        }
    }

    /// What a PMD map or unmap of a file folio costs beyond the common
    /// part (seed 003): Linux 6.1 (`subpage`, `page_add_file_rmap` with
    /// `compound`) updates every page's `_mapcount` as well (performed in
    /// `add`/`remove`, counted here); the 6.2-rc
    /// compound-lock design scans every page when the first PMD map, or the
    /// last PMD unmap (`edge`), finds pages mapped by PTEs
    /// (`nr_subpages_unmapped`; also performed in `add`/`remove`); later
    /// eras count with one atomic. Called before the PMD counters change.
    pub(super) fn file_pmd_extra(&self, f: Folio, edge: bool) -> Cost {
        let nr = f.nr_pages();
        if self.pmd_in_pages(f) {
            Cost { rmw: nr, lines: nr, ..Cost::default() }
        } else if self.seed_003() && edge && w(f, field::TOTAL).load(std::sync::atomic::Ordering::Relaxed) > 0 {
            Cost { lines: nr, ..Cost::default() }
        } else {
            Cost::default()
        }
    }

    /// Pages mapped by at least one PTE, by a scan of every page's
    /// `_mapcount` (`nr_subpages_unmapped`), each page's line read on
    /// simulated CPUs.
    pub(super) fn scan_pte_mapped(&self, f: Folio) -> u64 {
        if cacheline::accounting() {
            (0..f.nr_pages()).for_each(|p| cacheline::read(Structure::Folio, f.page(p)));
        }
        (0..f.nr_pages()).filter(|&i| f.page(i).mapcount.load(std::sync::atomic::Ordering::Relaxed) >= 0).count() as u64
    }

    /// Whether a PMD maps the folio, as a PTE update before 6.2 asks it
    /// after changing a page's `_mapcount` (`compound_mapcount`: a read of
    /// the second page's line).
    pub(super) fn pmd_mapped_now(&self, f: Folio) -> bool {
        cacheline::read(Structure::Folio, f.page(1));
        super::MapcountDesign::entire_mapcount(self, f) > 0
    }
}

impl std::ops::AddAssign for super::Cost {
    fn add_assign(&mut self, o: super::Cost) {
        self.rmw += o.rmw;
        self.locks += o.locks;
        self.lines += o.lines;
        self.spins += o.spins;
        self.lost += o.lost;
    }
}
