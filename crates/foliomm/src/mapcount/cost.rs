//! What each rmap operation costs a design, as its kernel code performs it:
//! atomic read-modify-writes, lock acquisitions and spins, and memmap cache
//! lines (seed 000's accounting of "4..9 additional atomic RMW operations").

use super::eras::{PageMapcounts, Total};
use super::fields::{field, w};
use super::large_mapcount::Entered;
use super::{Cost, Level};
use crate::folio::Folio;

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
        // once they are under the seqcount.
        if !entered.plain_pages {
            c.rmw += if pte { nr } else { 1 };
            if self.f.nr_pages_mapped {
                c.rmw += 1;
            }
        }
        if self.f.compound_lock {
            c.rmw += 1;
            c.locks += 1;
        }
        match self.f.total {
            Total::Ptes if pte => c.rmw += 1,
            Total::All if self.f.mm_ids => {
                // The bit lock is the only atomic; slots update under it.
                c.rmw += 1;
                c.locks += 1;
            }
            Total::All if self.f.rmap_sums.is_some() => {
                c.locks += 1;
                // Entering (1 RMW, 2 after a lost race) and leaving the
                // seqcount (the seed's 2 RMWs); the mapcount and each sum
                // are plain when alone, atomic otherwise.
                c.rmw += entered.rmw + 1 + if entered.exclusive { 0 } else { 1 + self.sum_words(f) };
            }
            Total::All => c.rmw += 1,
            _ => {}
        }
        // Descriptors: the pages whose _mapcount changed, the second page
        // (its fields), and for rmap-id the third (the square sum).
        let touches_second = !pte || self.f.nr_pages_mapped || self.f.total != Total::None || self.f.compound_lock;
        let mut lines = if pte { nr } else { 0 };
        let in_range = |p: u64| pte && first <= p && p < first + nr;
        if touches_second && !in_range(1) {
            lines += 1;
        }
        if self.f.rmap_sums.is_some() {
            lines += (2..=self.sum_words(f).min(f.nr_pages() - 1)).filter(|&p| !in_range(p)).count() as u64;
        }
        c.lines = lines;
        c
    }
}

impl PageMapcounts {
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
        } else if self.f.compound_lock && edge && w(f, field::TOTAL).load(std::sync::atomic::Ordering::Relaxed) > 0 {
            Cost { lines: nr, ..Cost::default() }
        } else {
            Cost::default()
        }
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
