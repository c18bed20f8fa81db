//! The rmap operations and queries of [`PageMapcounts`], the designs that
//! keep a `_mapcount` per page (mm/rmap.c `__folio_add_rmap`,
//! `__folio_remove_rmap`; include/linux/mm.h `folio_mapcount`,
//! `folio_maybe_mapped_shared`; mm/memory.c `__wp_can_reuse_large_anon_folio`).

use super::compound_lock::CompoundLock;
use super::eras::{Guess, PageMapcounts, Total};
use super::fields::{bump, field, set_slot_id, shared, slot_id, w, ENTIRELY_MAPPED};
use super::large_mapcount::Entered;
use super::{Added, Cost, FolioTruth, Level, MapcountDesign, MmId, Removed, RmapMm, SharedAnswer};
use crate::folio::Folio;
use crate::sync::atomic::Ordering::*;
use crate::sync::cacheline::Structure;
use crate::sync::{AtomicSeqcount, BitSpinLock};

impl PageMapcounts {
    /// Takes the compound lock around an update, for the design that has
    /// one (`lock_compound_mapcounts`); `None` for the others and for the
    /// unlocked variant.
    pub(super) fn lock<'a>(&self, f: Folio<'a>) -> Option<BitSpinLock<'a>> {
        let word = &f.page(1).flags;
        match self.f.compound_lock? {
            CompoundLock::BitSpinlock => Some(BitSpinLock::lock(Structure::Folio, word, field::COMPOUND_LOCK_BIT)),
            CompoundLock::Sleeping => {
                Some(BitSpinLock::lock_sleeping(Structure::Folio, word, field::COMPOUND_LOCK_BIT))
            }
            CompoundLock::Unlocked => None,
        }
    }

    /// Whether the design is seed 003's era: `subpages_mapcount` beside
    /// the compound mapcount, however it locks.
    pub(super) fn seed_003(&self) -> bool {
        self.f.compound_lock.is_some()
    }

    /// Whether every update takes a lock (for the cost counters).
    pub(super) fn takes_compound_lock(&self) -> bool {
        self.f.compound_lock.is_some_and(|l| l != CompoundLock::Unlocked)
    }
}

impl PageMapcounts {
    /// How many sum words the design keeps: 1 (`_mm_ids` in page 1), or
    /// the rmap sums' count ([`PageMapcounts::sum`] says where each is).
    pub(super) fn sum_words(&self, f: Folio) -> u64 {
        self.construction().map_or(1, |c| c.count(f.order()) as u64)
    }

    /// Whether a PMD mapping of `f` counts in every page's `_mapcount`
    /// too, as Linux 6.1 counts it for a file THP (`page_add_file_rmap`
    /// with `compound`: the `subpage` design).
    pub(super) fn pmd_in_pages(&self, f: Folio) -> bool {
        !f.test_anon() && !is_hugetlb(f) && self.f.total == Total::None && !self.f.nr_pages_mapped
    }

    /// `hugetlb_add_file_rmap` / `hugetlb_remove_rmap`: a hugetlb folio
    /// counts its mappings in `_entire_mapcount` and `_large_mapcount`
    /// only: no MM IDs, no `_nr_pages_mapped`, no page counts.
    fn hugetlb_add(&self, f: Folio, delta: i32) {
        w(f, field::ENTIRE).fetch_add(delta, Relaxed);
        if self.merges() {
            self.seqcount(f).add_merged(delta as i64);
        } else if self.f.total == Total::All {
            w(f, field::TOTAL).fetch_add(delta, Relaxed);
        }
    }

    /// The value `field::TOTAL` starts from.
    fn total_init(&self) -> i32 {
        if self.f.total == Total::Ptes {
            0
        } else {
            -1
        }
    }
}

impl MapcountDesign for PageMapcounts {
    fn name(&self) -> &'static str {
        self.name
    }

    /// The smallest order whose tail pages hold the rmap sums
    /// ([`PageMapcounts::sum`]: the `ids` of every tail page and the
    /// `link` of all but the first, or their pairs at `all-wide`).
    fn min_large_order(&self) -> u32 {
        let fits = |o: u32| self.construction().is_none_or(|c| c.count(o) as u64 <= (2u64 << o) - 3);
        (1..crate::arch::PMD_ORDER).find(|&o| fits(o)).unwrap_or(crate::arch::PMD_ORDER)
    }

    fn max_mm_id(&self) -> MmId {
        match self.construction() {
            Some(c) => (1 << c.id_bits()) - 1,
            None => field::ID_MASK as MmId,
        }
    }

    fn prep(&self, f: Folio) {
        f.page(1).clear(crate::phys::pg::DOUBLE_MAP);
        let ws = &f.page(1).w;
        ws[field::TOTAL].store(self.total_init(), Relaxed);
        ws[field::NR_PAGES_MAPPED].store(0, Relaxed);
        ws[field::ENTIRE].store(-1, Relaxed);
        ws[field::PINCOUNT].store(0, Relaxed);
        ws[field::SLOT0].store(-1, Relaxed);
        ws[field::SLOT0 + 1].store(-1, Relaxed);
        // __folio_prep_large_rmap(): raw_seqcount_init().
        let seq = if self.merges() { AtomicSeqcount::merged_init(self.total_init() as i64) } else { 0 };
        f.page(1).link.store(seq, Relaxed);
        for i in 0..self.sum_words(f) {
            self.set_sum(f, i, 0);
        }
    }

    fn fields(&self, f: Folio) -> Vec<(String, i64)> {
        self.named_fields(f)
    }

    fn forget_untracked(&self, f: Folio) {
        self.reset_untracked(f)
    }

    fn mm_created(&self, mm: &RmapMm) {
        if self.construction() == Some(super::construction::Construction::SeedSubIds) {
            mm.account_init();
        }
    }

    fn check_freeable(&self, f: Folio) -> Vec<String> {
        let ws = &f.page(1).w;
        let mut bad = Vec::new();
        let expect = [
            (field::TOTAL, self.total_init(), "_large_mapcount / subpages_mapcount"),
            (field::NR_PAGES_MAPPED, 0, "_nr_pages_mapped"),
            (field::ENTIRE, -1, "_entire_mapcount"),
            (field::PINCOUNT, 0, "_pincount"),
            (field::SLOT0, -1, "_mm_id_mapcount[0]"),
            (field::SLOT0 + 1, -1, "_mm_id_mapcount[1]"),
        ];
        for (i, want, name) in expect {
            let v = ws[i].load(Relaxed);
            if v != want {
                bad.push(format!("{name} is {v}, expected {want}"));
            }
        }
        bad.extend(f.page(1).test(crate::phys::pg::DOUBLE_MAP).then(|| "PG_double_map is set".to_string()));
        // The rmap seqcount's sequence may be anything; no writer may be inside.
        if self.f.rmap_sums.is_some() && !self.seqcount(f).is_idle() {
            bad.push(format!("rmap seqcount is {:#x}, a writer is inside", f.page(1).link.load(Relaxed)));
        }
        if self.merges() && self.large_raw(f) != self.total_init() {
            bad.push(format!(
                "the seqcount's merged mapcount is {}, expected {}",
                self.large_raw(f),
                self.total_init()
            ));
        }
        for i in 0..self.sum_words(f) {
            let ids = self.sum(f, i);
            if ids != 0 {
                bad.push(format!("sum word {}: _mm_ids / rmap sum is {ids:#x}, expected 0", i + 1));
            }
        }
        bad
    }

    fn add_new(&self, f: Folio, level: Level, mm: RmapMm) {
        if is_hugetlb(f) {
            return self.hugetlb_add(f, 1);
        }
        let nr = f.nr_pages() as i32;
        let (entire, nr_mapped, all, ptes) = match level {
            Level::Pte => {
                for i in (0..f.nr_pages()).filter(|_| self.f.page_mapcounts) {
                    f.page(i).mapcount.store(0, Relaxed);
                }
                (-1, nr, nr - 1, nr)
            }
            Level::Pmd => (0, ENTIRELY_MAPPED, 0, 0),
        };
        // folio_set_large_mapcount(): the folio is not visible yet, no lock.
        w(f, field::ENTIRE).store(entire, Relaxed);
        if self.f.nr_pages_mapped {
            w(f, field::NR_PAGES_MAPPED).store(nr_mapped, Relaxed);
        }
        match self.f.total {
            Total::All if self.merges() => f.page(1).link.store(AtomicSeqcount::merged_init(all as i64), Relaxed),
            Total::All => w(f, field::TOTAL).store(all, Relaxed),
            Total::Ptes => w(f, field::TOTAL).store(ptes, Relaxed),
            Total::None => {}
        }
        if self.f.mm_ids {
            w(f, field::SLOT0).store(all, Relaxed);
            set_slot_id(f, 0, mm.id);
        }
        if let Some(c) = self.construction().filter(|_| self.tracks(f)) {
            let n = if self.skips_entire(level) { 0 } else { (all + 1) as u64 };
            let mut scratch = None;
            for (i, &v) in self.rmap_values(c, f, &mm, &mut scratch).iter().enumerate() {
                self.set_sum(f, i as u64, n.wrapping_mul(v));
            }
        }
    }

    fn add(&self, f: Folio, first: u64, nr: u64, level: Level, mm: RmapMm) -> Added {
        if is_hugetlb(f) {
            // hugetlb pages count in no NR_*_MAPPED.
            self.hugetlb_add(f, 1);
            let cost = Cost { rmw: 1 + (self.f.total == Total::All) as u64, lines: 1, ..Cost::default() };
            return Added { newly_mapped: 0, cost };
        }
        let lock = self.lock(f);
        let section = self.begin_all(f);
        let delta = if level == Level::Pte { nr as i32 } else { 1 };
        // Plain updates for seed 000's exclusive writer, and under seed 003's
        // lock ("skipping the usual atomic operations on those fields").
        let plain = section.is_some_and(|w| w.exclusive) || lock.is_some();
        self.touch(f, first, nr, level, plain);
        let mut extra = Cost::default();
        let (entered, newly_mapped) = match level {
            Level::Pte => {
                let mut newly = 0;
                // CONFIG_NO_PAGE_MAPCOUNT: no per-page count to keep.
                for i in (first..first + nr).filter(|_| self.f.page_mapcounts) {
                    if bump(&f.page(i).mapcount, 1, plain) == -1 {
                        newly += 1;
                    }
                }
                let before = self.f.nr_pages_mapped.then(|| bump(w(f, field::NR_PAGES_MAPPED), newly, plain));
                let entered = match self.f.total {
                    Total::All => self.add_large(f, nr as i32, level, mm, section),
                    Total::Ptes => {
                        bump(w(f, field::TOTAL), nr as i32, plain);
                        Entered::default()
                    }
                    Total::None => Entered::default(),
                };
                let newly_mapped = match before {
                    _ if !self.f.page_mapcounts => self.whole_if_was_unmapped(f, entered.after + 1 == nr as i32),
                    // 6.2+: one atomic tells whether a PMD maps the folio.
                    Some(b) => (b + newly < ENTIRELY_MAPPED) as u64 * newly as u64,
                    // 6.1's page counts hold a file folio's PMD mappings.
                    None if self.pmd_in_pages(f) => newly as u64,
                    // 6.1's DoubleMap bias keeps a PMD-mapped page's count up.
                    None if self.double_maps(f) => self.newly_beside_pmd(f, newly as u64, &mut extra),
                    // Before 6.2: a page is newly mapped if no PMD maps the
                    // folio, read after counting the PTE: racy unlocked.
                    None => (!self.pmd_mapped_now(f)) as u64 * newly as u64,
                };
                (entered, newly_mapped)
            }
            Level::Pmd => {
                if !f.test_anon() {
                    let first = w(f, field::ENTIRE).load(Relaxed) == -1;
                    extra = self.file_pmd_extra(f, first);
                }
                let mut in_pages = 0;
                if self.pmd_in_pages(f) {
                    in_pages = (0..f.nr_pages()).filter(|&i| f.page(i).mapcount.fetch_add(1, Relaxed) == -1).count();
                }
                let first_pmd = bump(w(f, field::ENTIRE), 1, plain) == -1;
                let before = (first_pmd && self.f.nr_pages_mapped)
                    .then(|| bump(w(f, field::NR_PAGES_MAPPED), ENTIRELY_MAPPED, plain));
                let entered = if self.f.total == Total::All {
                    self.add_large(f, 1, level, mm, section)
                } else {
                    Entered::default()
                };
                let newly_mapped = match before {
                    _ if !self.f.page_mapcounts => self.whole_if_was_unmapped(f, entered.after == 0),
                    _ if self.pmd_in_pages(f) => in_pages as u64,
                    _ if !first_pmd => 0,
                    // 6.2+: the pages PTEs did not map, unless an unmap and
                    // another map raced ahead (`__folio_add_rmap`).
                    Some(b) if b < ENTIRELY_MAPPED => f.nr_pages().saturating_sub((b & (ENTIRELY_MAPPED - 1)) as u64),
                    Some(_) => 0,
                    // subpages_mapcount says whether pages are PTE-mapped:
                    // then the scan (`nr_subpages_unmapped`), racy unlocked.
                    None if self.f.total == Total::Ptes && w(f, field::TOTAL).load(Relaxed) == 0 => f.nr_pages(),
                    None => f.nr_pages() - self.scan_pte_mapped(f),
                };
                if self.double_maps(f) && first_pmd && newly_mapped < f.nr_pages() {
                    extra += self.set_double_map(f);
                }
                (entered, newly_mapped)
            }
        };
        self.end_all(f, section, delta);
        let mut cost = self.cost(f, first, nr, level, entered, lock.map_or(0, |l| l.spins()));
        cost += extra;
        Added { newly_mapped, cost }
    }

    fn remove(&self, f: Folio, first: u64, nr: u64, level: Level, mm: RmapMm) -> Removed {
        if is_hugetlb(f) {
            self.hugetlb_add(f, -1);
            let unmapped = if self.entire_mapcount(f) == 0 { f.nr_pages() } else { 0 };
            let cost = Cost { rmw: 1 + (self.f.total == Total::All) as u64, lines: 1, ..Cost::default() };
            return Removed { unmapped_pages: unmapped, cost, ..Removed::default() };
        }
        let lock = self.lock(f);
        let lock_spins = lock.as_ref().map_or(0, |l| l.spins());
        let nr_mapped = w(f, field::NR_PAGES_MAPPED);
        let section = self.begin_all(f);
        let delta = if level == Level::Pte { nr as i32 } else { 1 };
        // Plain updates for seed 000's exclusive writer, and under seed 003's
        // lock ("skipping the usual atomic operations on those fields").
        let plain = section.is_some_and(|w| w.exclusive) || lock.is_some();
        self.touch(f, first, nr, level, plain);
        let removed = match level {
            Level::Pte => {
                let entered = match self.f.total {
                    Total::All => self.sub_large(f, nr as i32, level, mm, section),
                    Total::Ptes => {
                        bump(w(f, field::TOTAL), -(nr as i32), plain);
                        Entered::default()
                    }
                    Total::None => Entered::default(),
                };
                if !self.f.page_mapcounts {
                    self.end_all(f, section, -delta);
                    let cost = self.cost(f, first, nr, level, entered, lock_spins);
                    return self.removed_without_page_mapcounts(f, (entered.after + 1) as u64, false, cost);
                }
                let mut last = 0;
                for page in f.phys().pages_ahead(f.pfn + first..f.pfn + first + nr) {
                    if bump(&page.mapcount, -1, plain) == 0 {
                        last += 1;
                    }
                }
                let after = self.f.nr_pages_mapped.then(|| bump(nr_mapped, -last, plain) - last);
                let unmapped = match after {
                    Some(a) if a >= ENTIRELY_MAPPED => 0,
                    None if !self.pmd_in_pages(f) && !self.double_maps(f) && self.pmd_mapped_now(f) => 0,
                    _ => last as u64,
                };
                // Without _nr_pages_mapped, whether pages stay mapped takes a
                // scan; only `split_queue_exact` eras ask.
                let still_mapped = || after.map_or_else(|| self.scan_pte_mapped(f) > 0, |a| a != 0);
                let queue = unmapped > 0 && (!self.f.split_queue_exact || still_mapped());
                let cost = self.cost(f, first, nr, level, entered, lock_spins);
                Removed { unmapped_pages: unmapped, deferred_split: queue, cost }
            }
            Level::Pmd => {
                let last = w(f, field::ENTIRE).load(Relaxed) == 0;
                let extra = if f.test_anon() { Cost::default() } else { self.file_pmd_extra(f, last) };
                // 6.1's file PMD: every page's count drops, and a page whose
                // count hits -1 is unmapped (`page_remove_file_rmap`).
                let in_pages = self.pmd_in_pages(f).then(|| {
                    (0..f.nr_pages()).filter(|&i| f.page(i).mapcount.fetch_sub(1, Relaxed) == 0).count() as u64
                });
                let entered = if self.f.total == Total::All {
                    self.sub_large(f, 1, level, mm, section)
                } else {
                    Entered::default()
                };
                let left = (entered.after + 1) as u64;
                let mut removed =
                    Removed { cost: self.cost(f, first, nr, level, entered, lock_spins), ..Removed::default() };
                removed.cost += extra;
                let last_pmd = bump(w(f, field::ENTIRE), -1, plain) == 0;
                if !self.f.page_mapcounts {
                    self.end_all(f, section, -delta);
                    return self.removed_without_page_mapcounts(f, left, last_pmd, removed.cost);
                }
                if let Some(unmapped) = in_pages {
                    removed.unmapped_pages = unmapped;
                } else if last_pmd {
                    let still = if self.f.nr_pages_mapped {
                        // An add of ENTIRELY_MAPPED raced ahead: it counted no
                        // page, and neither does this (`__folio_remove_rmap`).
                        let after = bump(nr_mapped, -ENTIRELY_MAPPED, plain) - ENTIRELY_MAPPED;
                        (after < ENTIRELY_MAPPED).then_some(after as u64)
                    } else if self.f.total == Total::Ptes && w(f, field::TOTAL).load(Relaxed) == 0 {
                        // subpages_mapcount says no page is PTE-mapped: no scan.
                        Some(0)
                    } else if self.double_maps(f) {
                        // page_remove_anon_compound_rmap: without DoubleMap
                        // no PTE maps a page; with it, lowering each count tells.
                        let (unmapped, cost) = self.clear_double_map(f).unwrap_or((f.nr_pages(), Cost::default()));
                        removed.cost += cost;
                        Some(f.nr_pages() - unmapped)
                    } else {
                        Some(self.scan_pte_mapped(f))
                    };
                    if let Some(still) = still.map(|s| s.min(f.nr_pages())) {
                        removed.unmapped_pages = f.nr_pages() - still;
                        removed.deferred_split = still > 0 && still < f.nr_pages();
                    }
                }
                removed
            }
        };
        self.end_all(f, section, -delta);
        removed
    }

    fn mapcount(&self, f: Folio) -> u64 {
        match self.f.total {
            Total::All => (self.large_raw(f) + 1) as u64,
            Total::Ptes => w(f, field::TOTAL).load(Relaxed) as u64 + self.entire_mapcount(f),
            // total_mapcount() of a hugetlb page: its compound mapcount.
            Total::None if is_hugetlb(f) => self.entire_mapcount(f),
            // folio_mapcount() before 6.10 (total_mapcount()): a scan over
            // every page, whose counts hold a file folio's PMD mappings too.
            Total::None => {
                let pages: u64 = (0..f.nr_pages()).map(|i| (f.page(i).mapcount.load(Relaxed) + 1) as u64).sum();
                let entire = self.entire_mapcount(f);
                let in_pages = if self.pmd_in_pages(f) { entire * f.nr_pages() } else { 0 };
                pages + entire - in_pages - self.double_map_bias(f) as u64 * f.nr_pages()
            }
        }
    }

    fn entire_mapcount(&self, f: Folio) -> u64 {
        (w(f, field::ENTIRE).load(Relaxed) + 1) as u64
    }

    fn page_mapcount(&self, f: Folio, i: u64) -> Option<u64> {
        if !self.f.page_mapcounts {
            return None;
        }
        let entire = if self.pmd_in_pages(f) { 0 } else { self.entire_mapcount(f) };
        Some((f.page(i).mapcount.load(Relaxed) + 1 - self.double_map_bias(f)) as u64 + entire)
    }

    fn maybe_mapped_shared(&self, f: Folio) -> SharedAnswer {
        if let (Some(c), false) = (self.construction(), is_hugetlb(f)) {
            return self.mapped_shared_once(c, f);
        }
        let m = self.mapcount(f);
        let shared = m > 1 && (!self.f.mm_ids || is_hugetlb(f) || shared(f));
        if shared {
            SharedAnswer::MaybeShared
        } else {
            SharedAnswer::Exclusive
        }
    }

    fn likely_mapped_shared(&self, f: Folio, i: u64) -> bool {
        let page_shared = |i| self.page_mapcount(f, i).is_some_and(|n| n > 1);
        match self.f.guess {
            Guess::Page => page_shared(i),
            Guess::FirstPage => page_shared(0),
            Guess::Likely => self.guess_shared(f),
            // Stage all-pmd: what the series replaced, for the folios it leaves out.
            Guess::Design if self.f.stage == super::RmapIdStage::AllPmd && !self.tracks(f) => self.guess_shared(f),
            Guess::Design => self.maybe_mapped_shared(f).maybe_shared(),
        }
    }

    fn can_reuse(&self, f: Folio, mm: MmId) -> bool {
        if self.f.rmap_sums.is_some() {
            // Reuse when this MM maps every mapping and nothing else holds a
            // reference (the seed's rule; no "large mapcount > 1" clause).
            return self.owned_by(f, mm) && self.mapcount(f) == f.refcount() as u64;
        }
        if !self.f.mm_ids {
            return false; // before 6.15 a large anon folio is always copied
        }
        let m = self.mapcount(f);
        if m <= 1 || shared(f) || m != f.refcount() as u64 {
            return false;
        }
        let _lock = BitSpinLock::lock(Structure::Folio, &f.page(1).ids, field::LOCK_BIT);
        let ids = f.page(1).ids.load(Relaxed);
        let ok = !shared(f) && self.mapcount(f) == f.refcount() as u64;
        debug_assert!(!ok || slot_id(ids, 0) == mm || slot_id(ids, 1) == mm);
        ok
    }

    fn knows_sharers(&self) -> bool {
        self.construction().is_some() || self.f.mm_ids
    }

    fn split_pmd(&self, f: Folio) -> Option<Cost> {
        self.double_maps(f).then(|| self.split_pmd_counts(f))
    }

    fn batches_pmd_split(&self) -> bool {
        self.f.batched_split && self.f.stage >= super::RmapIdStage::Batch
    }

    fn verify(&self, f: Folio, truth: &FolioTruth) -> Vec<String> {
        self.verify_fields(f, truth)
    }
}

/// Whether `f` is a hugetlb folio (`folio_test_hugetlb`).
pub(super) fn is_hugetlb(f: Folio) -> bool {
    f.head().test(crate::phys::pg::HUGETLB)
}
