//! The eras of Linux's mapcount: which counters each design keeps beside
//! the per-page `_mapcount` and `_entire_mapcount` (docs/KERNEL-REFERENCE.md §3),
//! and the table of the seven designs.

use super::compound_lock::CompoundLock;
use super::construction::Construction;
use super::stage::RmapIdStage;

/// What the counter in the second page counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Total {
    /// Nothing: the total mapcount is a scan over every page.
    None,
    /// `subpages_mapcount` (6.2-rc): the PTE mappings of all pages, unbiased.
    Ptes,
    /// `_large_mapcount` (6.10+): PTE and PMD mappings, biased by -1.
    All,
}

/// The counters one era of Linux keeps beside the per-page `_mapcount` and
/// `_entire_mapcount` (docs/KERNEL-REFERENCE.md §3).
#[derive(Clone, Copy, Debug)]
pub(super) struct Features {
    /// `_nr_pages_mapped`: pages mapped by PTEs + `ENTIRELY_MAPPED` (6.2+).
    pub(super) nr_pages_mapped: bool,
    pub(super) total: Total,
    /// Two MM-ID slots with per-slot mapcounts and the "maybe shared" bit
    /// under a bit spinlock in `_mm_ids` (6.15+).
    pub(super) mm_ids: bool,
    /// Seed 003's era (6.2-rc): how every update is serialised
    /// (`lock_compound_mapcounts`: a bit spinlock in the first tail page).
    pub(super) compound_lock: Option<CompoundLock>,
    /// Per-MM rmap-ID sums beside the large mapcount, under an atomic
    /// seqcount (seed 000's tracking), kept in the `ids` word of pages 1..=k:
    /// exact "mapped exclusively by MM x" where the construction fits.
    pub(super) rmap_sums: Option<Construction>,
    /// 6.10+ ("mm/rmap: do not add fully unmapped large folio to deferred
    /// split list"): a PTE unmap queues the folio for deferred split only if
    /// some page stays mapped. Before, every PTE unmap that unmapped a page
    /// queued it (6.1 `page_remove_rmap`, 6.2-6.9 `__folio_remove_rmap`),
    /// and freeing took it off the queue again.
    pub(super) split_queue_exact: bool,
    /// How policy code guesses "mapped shared" for a large folio.
    pub(super) guess: Guess,
    /// A PMD split adds its PTE mappings in one rmap call (6.8+,
    /// `folio_add_anon_rmap_ptes`; seed 000's patch 14) rather than page
    /// by page (`page_add_anon_rmap` per PTE, up to 6.7).
    pub(super) batched_split: bool,
    /// Seed 000's stage, for the rmap-ID designs ([`RmapIdStage::All`]
    /// for the others, which do not read it).
    pub(super) stage: RmapIdStage,
    /// A `_mapcount` per page of a large folio (`CONFIG_PAGE_MAPCOUNT`);
    /// without, only the folio's counts (`CONFIG_NO_PAGE_MAPCOUNT`, 6.15+).
    pub(super) page_mapcounts: bool,
    /// `PG_double_map` (Linux <= 6.1): a PMD split while other PMDs map an
    /// anon THP raises every page's `_mapcount` by one until the last PMD
    /// goes, so PTE updates need no look at the PMD count.
    pub(super) double_map: bool,
}

/// The guess an era's policy code (madvise cold/pageout/free, NUMA
/// balancing, mempolicy, khugepaged) makes to skip folios other MMs use. Not
/// a safety decision: before 6.15 it may be wrong both ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Guess {
    /// Linux <= 6.3: `page_mapcount(page) != 1` of the page at hand.
    Page,
    /// 6.4-6.9 `folio_estimated_sharers`, renamed `folio_likely_mapped_shared`
    /// in 6.9: `page_mapcount` of the first page > 1.
    FirstPage,
    /// 6.10-6.14 `folio_likely_mapped_shared`: total mapcount <= 1 means
    /// exclusive; a PMD mapping or more mappings than pages means shared;
    /// otherwise the first page decides.
    Likely,
    /// The design's own answer: seed 000's precise `folio_mapped_shared`,
    /// 6.15+'s `folio_maybe_mapped_shared`.
    Design,
}

/// The designs that keep a `_mapcount` per page, from Linux 6.1 to 6.15+.
/// Designs before 6.15 answer "maybe mapped shared?" conservatively
/// (mapcount > 1) and always copy a large folio on COW; `mm-id` (its slots)
/// and both `rmap-id`s (their sums) can prove a single owner and reuse it.
/// `subpage` keeps 6.1's `PG_double_map` ([`super::double_map`]).
#[derive(Clone, Copy, Debug)]
pub struct PageMapcounts {
    pub(super) name: &'static str,
    pub(super) f: Features,
}

/// The designs, in [`super::Design`] order.
pub(super) const DESIGNS: [PageMapcounts; 7] = [
    // Linux <= 6.1: per-page + compound mapcount; totals scan every page.
    PageMapcounts {
        name: "subpage",
        f: Features {
            nr_pages_mapped: false,
            total: Total::None,
            mm_ids: false,
            compound_lock: None,
            rmap_sums: None,
            split_queue_exact: false,
            guess: Guess::Page,
            batched_split: false,
            stage: RmapIdStage::All,
            page_mapcounts: true,
            double_map: true,
        },
    },
    // Seed 003 (6.2-rc): + subpages_mapcount, everything under a bit spinlock.
    PageMapcounts {
        name: "compound-locked",
        f: Features {
            nr_pages_mapped: false,
            total: Total::Ptes,
            mm_ids: false,
            compound_lock: Some(CompoundLock::BitSpinlock),
            rmap_sums: None,
            split_queue_exact: false,
            guess: Guess::Page,
            batched_split: false,
            stage: RmapIdStage::All,
            page_mapcounts: true,
            double_map: false,
        },
    },
    // Linux 6.2-6.9: _nr_pages_mapped + ENTIRELY_MAPPED, atomics only.
    PageMapcounts {
        name: "nr-mapped",
        f: Features {
            nr_pages_mapped: true,
            total: Total::None,
            mm_ids: false,
            compound_lock: None,
            rmap_sums: None,
            split_queue_exact: false,
            guess: Guess::FirstPage,
            batched_split: false,
            stage: RmapIdStage::All,
            page_mapcounts: true,
            double_map: false,
        },
    },
    // Linux 6.10-6.14: + _large_mapcount (O(1) total).
    PageMapcounts {
        name: "large-mapcount",
        f: Features {
            nr_pages_mapped: true,
            total: Total::All,
            mm_ids: false,
            compound_lock: None,
            rmap_sums: None,
            split_queue_exact: true,
            guess: Guess::Likely,
            batched_split: true,
            stage: RmapIdStage::All,
            page_mapcounts: true,
            double_map: false,
        },
    },
    // Seed 000 (RFC, not merged): + rmap-ID sums under an atomic seqcount;
    // COW reuses PTE-mapped THP when exact. With the RFC's sub-IDs, and with
    // the power-sum construction of docs/DESIGN.md.
    PageMapcounts {
        name: "rmap-id",
        f: Features {
            nr_pages_mapped: true,
            total: Total::All,
            mm_ids: false,
            compound_lock: None,
            rmap_sums: Some(Construction::SeedSubIds),
            split_queue_exact: false,
            guess: Guess::Design,
            batched_split: true,
            stage: RmapIdStage::All,
            page_mapcounts: true,
            double_map: false,
        },
    },
    PageMapcounts {
        name: "rmap-id-powersum",
        f: Features {
            nr_pages_mapped: true,
            total: Total::All,
            mm_ids: false,
            compound_lock: None,
            rmap_sums: Some(Construction::PowerSum),
            split_queue_exact: false,
            guess: Guess::Design,
            batched_split: true,
            stage: RmapIdStage::All,
            page_mapcounts: true,
            double_map: false,
        },
    },
    // Linux 6.15+ (CONFIG_MM_ID, default CONFIG_PAGE_MAPCOUNT): + MM-ID slots
    // (include/linux/rmap.h folio_add_return_large_mapcount,
    // folio_sub_return_large_mapcount; mm/rmap.c __folio_add_rmap,
    // __folio_remove_rmap).
    PageMapcounts {
        name: "mm-id",
        f: Features {
            nr_pages_mapped: true,
            total: Total::All,
            mm_ids: true,
            compound_lock: None,
            rmap_sums: None,
            split_queue_exact: true,
            guess: Guess::Design,
            batched_split: true,
            stage: RmapIdStage::All,
            page_mapcounts: true,
            double_map: false,
        },
    },
];

/// `mm-id` built with `CONFIG_NO_PAGE_MAPCOUNT` (6.15+, seed 000's "(e)
/// interest in removing the subpage mapcount"): no per-page `_mapcount`
/// and no `_nr_pages_mapped` in a large folio; whether it is partially
/// mapped is judged by its large mapcount against its size.
pub(super) static MM_ID_NO_PAGE_MAPCOUNT: PageMapcounts = {
    let mut d = DESIGNS[6];
    d.f.page_mapcounts = false;
    d.f.nr_pages_mapped = false;
    d
};

/// The rmap-ID designs at every stage of seed 000's series, in
/// [`RmapIdStage::ALL`] order: `rmap-id`, then `rmap-id-powersum`.
/// At the "mapcount" stage they have no rmap sums and guess as 6.10's
/// `folio_likely_mapped_shared` does (patch 3's `folio_mapped_shared`).
pub(super) static RMAP_ID_STAGES: [[PageMapcounts; RmapIdStage::ALL.len()]; 2] =
    [staged(DESIGNS[4]), staged(DESIGNS[5])];

const fn staged(base: PageMapcounts) -> [PageMapcounts; RmapIdStage::ALL.len()] {
    let mut out = [base; RmapIdStage::ALL.len()];
    let mut i = 0;
    while i < out.len() {
        out[i].f.stage = RmapIdStage::ALL[i];
        i += 1;
    }
    out[0].f.rmap_sums = None;
    out[0].f.guess = Guess::Likely;
    out[RmapIdStage::All32 as usize].f.rmap_sums = Some(Construction::SeedSubIds32);
    out
}

/// `compound-locked` with each way of locking, in [`CompoundLock::ALL`] order.
static COMPOUND_LOCKED: [PageMapcounts; 3] = {
    let base = DESIGNS[super::Design::CompoundLocked as usize];
    let mut out = [base; 3];
    out[1].f.compound_lock = Some(CompoundLock::Sleeping);
    out[2].f.compound_lock = Some(CompoundLock::Unlocked);
    out
};

impl CompoundLock {
    /// The `compound-locked` design taking its lock this way.
    pub fn design(self) -> &'static dyn super::MapcountDesign {
        &COMPOUND_LOCKED[self as usize]
    }
}
