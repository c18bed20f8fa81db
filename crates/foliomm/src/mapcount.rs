//! Mapcount designs: how a folio counts its page-table mappings and answers
//! "is it mapped by more than one address space?".
//!
//! Small folios count in the head page's `_mapcount` the same way in every
//! design (handled by [`crate::rmap`]); a [`MapcountDesign`] owns the fields of
//! large folios. [`PageMapcounts`] carries the designs that keep a mapcount
//! per page, from Linux 6.1 to the 6.15+ default (`mm-id`); designs without
//! per-page counts (seed 000's rmap IDs) plug into the same trait.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::*;

use crate::construction::Construction;
use crate::folio::Folio;
use crate::sync::{AtomicSeqcount, BitSpinLock};

/// An address space's identity in folio slots (`mm_id_t`; 0 is `MM_ID_DUMMY`).
pub type MmId = u32;

/// Which page-table level a mapping uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// `nr` PTEs mapping consecutive pages.
    Pte,
    /// One PMD mapping the whole (PMD-sized) folio.
    Pmd,
}

/// What an rmap removal did to the folio (`__folio_remove_rmap` results).
#[derive(Clone, Copy, Debug, Default)]
pub struct Removed {
    /// Pages that stopped being mapped (`NR_ANON_MAPPED` delta).
    pub unmapped_pages: u64,
    /// Queue the folio for deferred split: it stays mapped in part (6.10+),
    /// or, in earlier eras, a PTE unmap unmapped one of its pages.
    pub deferred_split: bool,
}

/// Ground truth for one folio, rebuilt by the checker from page-table walks.
#[derive(Clone, Debug, Default)]
pub struct FolioTruth {
    /// PTE mappings of each page.
    pub pte: Vec<u32>,
    /// PMD mappings of the whole folio.
    pub pmd: u32,
    /// Mappings (PTEs + PMDs) per address space.
    pub per_mm: BTreeMap<MmId, u32>,
}

impl FolioTruth {
    pub fn total(&self) -> u32 {
        self.pte.iter().sum::<u32>() + self.pmd
    }
}

/// The operations the rmap layer performs on a large folio's counters, and
/// the queries it asks. Every method runs with the PTL of the table being
/// changed held, as in Linux.
pub trait MapcountDesign: Send + Sync {
    /// The design's name (`--mapcount NAME`).
    fn name(&self) -> &'static str;
    /// The largest MM ID the design can track: `MM_ID_MAX` (2^31 - 1) for
    /// mm-id and, as the model allocates IDs for every design, for the ones
    /// that do not use them; 2^24 - 1 ("up to 16M") for seed 000's rmap IDs.
    fn max_mm_id(&self) -> MmId;
    /// Initialises the fields of a freshly allocated large folio (`prep_compound_head`).
    fn prep(&self, f: Folio);
    /// Returns a description of each field not back at its initial value
    /// (`free_tail_page_prepare` "bad page" checks); empty when freeable.
    fn check_freeable(&self, f: Folio) -> Vec<String>;
    /// First mapping of a new folio by `mm`: all pages by PTEs, or one PMD
    /// (`folio_add_new_anon_rmap`).
    fn add_new(&self, f: Folio, level: Level, mm: MmId);
    /// Adds `nr` PTE mappings of pages `first..first+nr`, or one PMD mapping.
    fn add(&self, f: Folio, first: u64, nr: u64, level: Level, mm: MmId);
    /// Removes mappings, the mirror image of [`MapcountDesign::add`].
    fn remove(&self, f: Folio, first: u64, nr: u64, level: Level, mm: MmId) -> Removed;
    /// `folio_mapcount`: page-table entries (PTEs and PMDs) mapping the folio.
    fn mapcount(&self, f: Folio) -> u64;
    /// `folio_entire_mapcount`: PMD mappings.
    fn entire_mapcount(&self, f: Folio) -> u64;
    /// `folio_precise_page_mapcount`: entries mapping page `i`, if the design
    /// keeps per-page counts.
    fn page_mapcount(&self, f: Folio, i: u64) -> Option<u64>;
    /// `folio_maybe_mapped_shared`: false only if one MM maps the folio; may be
    /// true although one MM maps it (imprecise designs).
    fn maybe_mapped_shared(&self, f: Folio) -> bool;
    /// The era's guess whether the folio holding page `i` is mapped by more
    /// than one MM, as policy code asks it; may be wrong either way before
    /// 6.15 (see [`Guess`]).
    fn likely_mapped_shared(&self, f: Folio, i: u64) -> bool;
    /// Whether a write fault by `mm` may reuse the whole large anon folio
    /// (`__wp_can_reuse_large_anon_folio`); false means copy.
    fn can_reuse(&self, f: Folio, mm: MmId) -> bool;
    /// Compares the design's fields with the ground truth; returns violations.
    fn verify(&self, f: Folio, truth: &FolioTruth) -> Vec<String>;
    /// What the last add or remove of `nr` pages (or one PMD) from `first`
    /// cost, counted as the kernel's code for the design performs it.
    fn cost(&self, f: Folio, first: u64, nr: u64, level: Level) -> Cost;
}

/// The cost of one rmap operation on a large folio.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    /// Atomic read-modify-writes (a bit-spinlock unlock is a plain store).
    pub rmw: u64,
    /// Lock acquisitions (bit spinlocks, atomic seqcount entries).
    pub locks: u64,
    /// Distinct memmap descriptors, each a 64-byte cache line.
    pub lines: u64,
}

thread_local! {
    /// Whether this thread's last rmap-id update entered the seqcount alone.
    static LAST_EXCLUSIVE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Chooses a design by name.
pub fn design_by_name(name: &str) -> Option<Box<dyn MapcountDesign>> {
    DESIGNS.iter().find(|d| d.name == name).map(|d| Box::new(*d) as Box<dyn MapcountDesign>)
}

/// Names of the designs foliomm carries, oldest first.
pub const DESIGN_NAMES: &[&str] =
    &["subpage", "compound-locked", "nr-mapped", "large-mapcount", "rmap-id", "rmap-id-powersum", "mm-id"];

/// What the counter in the second page counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Total {
    /// Nothing: the total mapcount is a scan over every page.
    None,
    /// `subpages_mapcount` (6.2-rc): the PTE mappings of all pages, unbiased.
    Ptes,
    /// `_large_mapcount` (6.10+): PTE and PMD mappings, biased by -1.
    All,
}

/// The counters one era of Linux keeps beside the per-page `_mapcount` and
/// `_entire_mapcount` (KERNEL-REFERENCE §3).
#[derive(Clone, Copy, Debug)]
struct Features {
    /// `_nr_pages_mapped`: pages mapped by PTEs + `ENTIRELY_MAPPED` (6.2+).
    nr_pages_mapped: bool,
    total: Total,
    /// Two MM-ID slots with per-slot mapcounts and the "maybe shared" bit
    /// under a bit spinlock in `_mm_ids` (6.15+).
    mm_ids: bool,
    /// Every update under a bit spinlock in the first tail page (6.2-rc,
    /// seed 003: `lock_compound_mapcounts`).
    compound_lock: bool,
    /// Per-MM rmap-ID sums beside the large mapcount, under an atomic
    /// seqcount (seed 000's tracking), kept in the `ids` word of pages 1..=k:
    /// exact "mapped exclusively by MM x" where the construction fits.
    rmap_sums: Option<Construction>,
    /// 6.10+ ("mm/rmap: do not add fully unmapped large folio to deferred
    /// split list"): a PTE unmap queues the folio for deferred split only if
    /// some page stays mapped. Before, every PTE unmap that unmapped a page
    /// queued it (6.1 `page_remove_rmap`, 6.2-6.9 `__folio_remove_rmap`),
    /// and freeing took it off the queue again.
    split_queue_exact: bool,
    /// How policy code guesses "mapped shared" for a large folio.
    guess: Guess,
}

/// The guess an era's policy code (madvise cold/pageout/free, NUMA
/// balancing, mempolicy, khugepaged) makes to skip folios other MMs use. Not
/// a safety decision: before 6.15 it may be wrong both ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Guess {
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
/// Differs from Linux: statistics (NR_ANON_MAPPED) are returned to the
/// caller instead of kept per node, and `subpage` has no DoubleMap (it
/// counted PMD-split pages twice to spare work; the counts are the same, but
/// its PMD unmap scans every page where 6.1 scanned only with DoubleMap).
#[derive(Clone, Copy, Debug)]
pub struct PageMapcounts {
    name: &'static str,
    f: Features,
}

const DESIGNS: [PageMapcounts; 7] = [
    // Linux <= 6.1: per-page + compound mapcount; totals scan every page.
    PageMapcounts {
        name: "subpage",
        f: Features {
            nr_pages_mapped: false,
            total: Total::None,
            mm_ids: false,
            compound_lock: false,
            rmap_sums: None,
            split_queue_exact: false,
            guess: Guess::Page,
        },
    },
    // Seed 003 (6.2-rc): + subpages_mapcount, everything under a bit spinlock.
    PageMapcounts {
        name: "compound-locked",
        f: Features {
            nr_pages_mapped: false,
            total: Total::Ptes,
            mm_ids: false,
            compound_lock: true,
            rmap_sums: None,
            split_queue_exact: false,
            guess: Guess::Page,
        },
    },
    // Linux 6.2-6.9: _nr_pages_mapped + ENTIRELY_MAPPED, atomics only.
    PageMapcounts {
        name: "nr-mapped",
        f: Features {
            nr_pages_mapped: true,
            total: Total::None,
            mm_ids: false,
            compound_lock: false,
            rmap_sums: None,
            split_queue_exact: false,
            guess: Guess::FirstPage,
        },
    },
    // Linux 6.10-6.14: + _large_mapcount (O(1) total).
    PageMapcounts {
        name: "large-mapcount",
        f: Features {
            nr_pages_mapped: true,
            total: Total::All,
            mm_ids: false,
            compound_lock: false,
            rmap_sums: None,
            split_queue_exact: true,
            guess: Guess::Likely,
        },
    },
    // Seed 000 (RFC, not merged): + rmap-ID sums under an atomic seqcount;
    // COW reuses PTE-mapped THP when exact. With the RFC's sub-IDs, and with
    // the power-sum construction of DESIGN.md.
    PageMapcounts {
        name: "rmap-id",
        f: Features {
            nr_pages_mapped: true,
            total: Total::All,
            mm_ids: false,
            compound_lock: false,
            rmap_sums: Some(Construction::SeedSubIds),
            split_queue_exact: false,
            guess: Guess::Design,
        },
    },
    PageMapcounts {
        name: "rmap-id-powersum",
        f: Features {
            nr_pages_mapped: true,
            total: Total::All,
            mm_ids: false,
            compound_lock: false,
            rmap_sums: Some(Construction::PowerSum),
            split_queue_exact: false,
            guess: Guess::Design,
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
            compound_lock: false,
            rmap_sums: None,
            split_queue_exact: true,
            guess: Guess::Design,
        },
    },
];

/// Field layout in the second page's descriptor (`folio->_large_mapcount` etc.).
mod field {
    /// `_large_mapcount`, or `subpages_mapcount` in compound-locked.
    pub const TOTAL: usize = 0;
    pub const NR_PAGES_MAPPED: usize = 1;
    pub const ENTIRE: usize = 2;
    pub const PINCOUNT: usize = crate::folio::PINCOUNT_WORD;
    pub const SLOT0: usize = 4;
    /// `FOLIO_MM_IDS_LOCK_BITNUM`: top bit of `_mm_id[0]`.
    pub const LOCK_BIT: u32 = 31;
    /// `FOLIO_MM_IDS_SHARED_BITNUM`: top bit of `_mm_id[1]`.
    pub const SHARED_BIT: u32 = 63;
    pub const ID_MASK: u64 = (1 << 31) - 1;
    /// The compound lock: `PG_locked` of the first tail page.
    pub const COMPOUND_LOCK_BIT: u32 = 0;
    /// rmap-id: the atomic seqcount (in the word mm-id uses for slot 0).
    pub const SEQCOUNT: usize = SLOT0;
}

/// `ENTIRELY_MAPPED`: added to `_nr_pages_mapped` while a PMD maps the folio.
pub const ENTIRELY_MAPPED: i32 = 0x80_0000;

fn w(f: Folio<'_>, i: usize) -> &std::sync::atomic::AtomicI32 {
    &f.page(1).w[i]
}

fn slot_id(ids: u64, s: usize) -> MmId {
    ((ids >> (32 * s)) & field::ID_MASK) as MmId
}

fn set_slot_id(f: Folio, s: usize, id: MmId) {
    let shift = 32 * s as u32;
    let mask = field::ID_MASK << shift;
    let ids = &f.page(1).ids;
    let cur = ids.load(Relaxed);
    // The caller holds the lock bit (or owns the new folio); keep every flag bit.
    ids.store((cur & !mask) | ((id as u64) << shift), Relaxed);
}

fn set_shared(f: Folio, on: bool) {
    let bit = 1u64 << field::SHARED_BIT;
    if on {
        f.page(1).ids.fetch_or(bit, Relaxed);
    } else {
        f.page(1).ids.fetch_and(!bit, Relaxed);
    }
}

fn shared(f: Folio) -> bool {
    f.page(1).ids.load(Relaxed) & (1 << field::SHARED_BIT) != 0
}

/// Pages mapped by at least one PTE, counted the slow way.
fn pages_mapped_by_ptes(f: Folio) -> u64 {
    (0..f.nr_pages()).filter(|&i| f.page(i).mapcount.load(Relaxed) >= 0).count() as u64
}

impl PageMapcounts {
    /// `folio_add_return_large_mapcount`: raw large mapcount += d and, with
    /// MM-IDs, the slot bookkeeping of KERNEL-REFERENCE §2.5.
    fn add_large(&self, f: Folio, d: i32, mm: MmId) {
        if let Some(c) = self.f.rmap_sums {
            return self.update_sums(c, f, d, mm);
        }
        if !self.f.mm_ids {
            w(f, field::TOTAL).fetch_add(d, Relaxed);
            return;
        }
        let _lock = BitSpinLock::lock(&f.page(1).ids, field::LOCK_BIT);
        let large = w(f, field::TOTAL);
        let t = large.load(Relaxed) + d;
        large.store(t, Relaxed);
        let ids = f.page(1).ids.load(Relaxed);
        for s in 0..2 {
            if slot_id(ids, s) == mm {
                w(f, field::SLOT0 + s).fetch_add(d, Relaxed);
                return;
            }
        }
        if slot_id(ids, 0) == 0 {
            set_slot_id(f, 0, mm);
            w(f, field::SLOT0).store(d - 1, Relaxed);
            if t != d - 1 {
                set_shared(f, true);
            }
        } else if slot_id(ids, 1) == 0 {
            set_slot_id(f, 1, mm);
            w(f, field::SLOT0 + 1).store(d - 1, Relaxed);
            set_shared(f, true);
        }
        // Else: both slots belong to other MMs; this MM is untracked and the
        // shared bit is necessarily set already.
    }

    /// `folio_sub_return_large_mapcount`.
    fn sub_large(&self, f: Folio, d: i32, mm: MmId) {
        if let Some(c) = self.f.rmap_sums {
            return self.update_sums(c, f, -d, mm);
        }
        if !self.f.mm_ids {
            w(f, field::TOTAL).fetch_sub(d, Relaxed);
            return;
        }
        let _lock = BitSpinLock::lock(&f.page(1).ids, field::LOCK_BIT);
        let large = w(f, field::TOTAL);
        let t = large.load(Relaxed) - d;
        large.store(t, Relaxed);
        let ids = f.page(1).ids.load(Relaxed);
        for s in 0..2 {
            if slot_id(ids, s) == mm {
                let c = w(f, field::SLOT0 + s);
                let v = c.load(Relaxed) - d;
                if v >= 0 {
                    c.store(v, Relaxed);
                    return;
                }
                c.store(-1, Relaxed);
                set_slot_id(f, s, 0);
                break;
            }
        }
        if w(f, field::SLOT0).load(Relaxed) == t || w(f, field::SLOT0 + 1).load(Relaxed) == t {
            set_shared(f, false);
        }
    }

    /// rmap-id: large mapcount += d and each rmap sum += d·value(mm), inside
    /// the atomic seqcount; plain updates when the writer is alone.
    fn update_sums(&self, c: Construction, f: Folio, d: i32, mm: MmId) {
        debug_assert!((mm as u64) < 1 << 24, "rmap IDs are 24-bit");
        let values = c.values(mm as u64, f.order());
        let total = w(f, field::TOTAL);
        let seq = AtomicSeqcount(w(f, field::SEQCOUNT));
        let exclusive = seq.write_begin();
        LAST_EXCLUSIVE.with(|e| e.set(exclusive));
        if exclusive {
            total.store(total.load(Relaxed) + d, Relaxed);
        } else {
            total.fetch_add(d, Relaxed);
        }
        for (i, &v) in values.iter().enumerate() {
            let delta = (d as i64 as u64).wrapping_mul(v);
            let sum = &f.page(1 + i as u64).ids;
            if exclusive {
                sum.store(sum.load(Relaxed).wrapping_add(delta), Relaxed);
            } else {
                sum.fetch_add(delta, Relaxed);
            }
        }
        seq.write_end(exclusive);
    }

    /// rmap-id: a consistent mapcount and rmap sums.
    fn sums(&self, c: Construction, f: Folio) -> (u64, Vec<u64>) {
        let k = c.count(f.order()) as u64;
        AtomicSeqcount(w(f, field::SEQCOUNT)).read(|| {
            let m = (w(f, field::TOTAL).load(Relaxed) + 1) as u64;
            (m, (1..=k).map(|p| f.page(p).ids.load(Relaxed)).collect())
        })
    }

    /// rmap-id: the MM that maps every mapping of the folio, if one does
    /// (`__folio_has_large_matching_rmap_val` for every candidate at once).
    fn sole_owner(&self, f: Folio) -> Option<MmId> {
        let c = self.f.rmap_sums?;
        let (n, sums) = self.sums(c, f);
        if n > f.nr_pages() {
            return None; // more mappings than pages: obviously shared
        }
        c.owner(n, &sums, f.order()).map(|a| a as MmId)
    }

    /// The compound lock, for the design that takes it around every update.
    fn lock<'a>(&self, f: Folio<'a>) -> Option<BitSpinLock<'a>> {
        self.f.compound_lock.then(|| BitSpinLock::lock(&f.page(1).flags, field::COMPOUND_LOCK_BIT))
    }

    /// The pages whose `ids` word the design uses: page 1 (`_mm_ids`), or
    /// the rmap sums in pages 1..=k.
    fn sum_pages(&self, f: Folio) -> u64 {
        self.f.rmap_sums.map_or(1, |c| c.count(f.order()) as u64)
    }

    /// The value `field::SLOT0` starts from: a free slot, or the seqcount.
    fn slot0_init(&self) -> i32 {
        if self.f.rmap_sums.is_some() {
            0
        } else {
            -1
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

    fn max_mm_id(&self) -> MmId {
        match self.f.rmap_sums {
            Some(_) => (1 << crate::construction::ID_BITS) - 1,
            None => field::ID_MASK as MmId,
        }
    }

    fn prep(&self, f: Folio) {
        let ws = &f.page(1).w;
        ws[field::TOTAL].store(self.total_init(), Relaxed);
        ws[field::NR_PAGES_MAPPED].store(0, Relaxed);
        ws[field::ENTIRE].store(-1, Relaxed);
        ws[field::PINCOUNT].store(0, Relaxed);
        ws[field::SLOT0].store(self.slot0_init(), Relaxed);
        ws[field::SLOT0 + 1].store(-1, Relaxed);
        for p in 1..=self.sum_pages(f) {
            f.page(p).ids.store(0, Relaxed);
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
            (field::SLOT0 + 1, -1, "_mm_id_mapcount[1]"),
        ];
        for (i, want, name) in expect {
            let v = ws[i].load(Relaxed);
            if v != want {
                bad.push(format!("{name} is {v}, expected {want}"));
            }
        }
        // The rmap seqcount's sequence may be anything; no writer may be inside.
        let slot0 = ws[field::SLOT0].load(Relaxed);
        let idle = if self.f.rmap_sums.is_some() { AtomicSeqcount(&ws[field::SLOT0]).is_idle() } else { slot0 == -1 };
        if !idle {
            bad.push(format!("_mm_id_mapcount[0] / rmap seqcount is {slot0:#x}"));
        }
        for p in 1..=self.sum_pages(f) {
            let ids = f.page(p).ids.load(Relaxed);
            if ids != 0 {
                bad.push(format!("page {p}: _mm_ids / rmap sum is {ids:#x}, expected 0"));
            }
        }
        for i in 0..f.nr_pages() {
            let m = f.page(i).mapcount.load(Relaxed);
            if m != -1 {
                bad.push(format!("page {i} _mapcount is {m}, expected -1"));
            }
        }
        bad
    }

    fn add_new(&self, f: Folio, level: Level, mm: MmId) {
        let nr = f.nr_pages() as i32;
        let (entire, nr_mapped, all, ptes) = match level {
            Level::Pte => {
                for i in 0..f.nr_pages() {
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
            Total::All => w(f, field::TOTAL).store(all, Relaxed),
            Total::Ptes => w(f, field::TOTAL).store(ptes, Relaxed),
            Total::None => {}
        }
        if self.f.mm_ids {
            w(f, field::SLOT0).store(all, Relaxed);
            set_slot_id(f, 0, mm);
        }
        if let Some(c) = self.f.rmap_sums {
            let n = (all + 1) as u64;
            for (i, &v) in c.values(mm as u64, f.order()).iter().enumerate() {
                f.page(1 + i as u64).ids.store(n.wrapping_mul(v), Relaxed);
            }
        }
    }

    fn add(&self, f: Folio, first: u64, nr: u64, level: Level, mm: MmId) {
        let _lock = self.lock(f);
        match level {
            Level::Pte => {
                let mut newly = 0;
                for i in first..first + nr {
                    if f.page(i).mapcount.fetch_add(1, Relaxed) == -1 {
                        newly += 1;
                    }
                }
                if self.f.nr_pages_mapped {
                    w(f, field::NR_PAGES_MAPPED).fetch_add(newly, Relaxed);
                }
                match self.f.total {
                    Total::All => self.add_large(f, nr as i32, mm),
                    Total::Ptes => {
                        w(f, field::TOTAL).fetch_add(nr as i32, Relaxed);
                    }
                    Total::None => {}
                }
            }
            Level::Pmd => {
                let first_pmd = w(f, field::ENTIRE).fetch_add(1, Relaxed) == -1;
                if first_pmd && self.f.nr_pages_mapped {
                    w(f, field::NR_PAGES_MAPPED).fetch_add(ENTIRELY_MAPPED, Relaxed);
                }
                if self.f.total == Total::All {
                    self.add_large(f, 1, mm);
                }
            }
        }
    }

    fn remove(&self, f: Folio, first: u64, nr: u64, level: Level, mm: MmId) -> Removed {
        let _lock = self.lock(f);
        let nr_mapped = w(f, field::NR_PAGES_MAPPED);
        match level {
            Level::Pte => {
                match self.f.total {
                    Total::All => self.sub_large(f, nr as i32, mm),
                    Total::Ptes => {
                        w(f, field::TOTAL).fetch_sub(nr as i32, Relaxed);
                    }
                    Total::None => {}
                }
                let mut last = 0;
                for i in first..first + nr {
                    if f.page(i).mapcount.fetch_sub(1, Relaxed) == 0 {
                        last += 1;
                    }
                }
                let after = self.f.nr_pages_mapped.then(|| nr_mapped.fetch_sub(last, Relaxed) - last);
                let unmapped = match after {
                    Some(a) if a >= ENTIRELY_MAPPED => 0,
                    None if self.entire_mapcount(f) > 0 => 0,
                    _ => last as u64,
                };
                // Without _nr_pages_mapped, whether pages stay mapped takes a
                // scan; only `split_queue_exact` eras ask.
                let still_mapped = || after.map_or_else(|| pages_mapped_by_ptes(f) > 0, |a| a != 0);
                let queue = unmapped > 0 && (!self.f.split_queue_exact || still_mapped());
                Removed { unmapped_pages: unmapped, deferred_split: queue }
            }
            Level::Pmd => {
                if self.f.total == Total::All {
                    self.sub_large(f, 1, mm);
                }
                let mut removed = Removed::default();
                if w(f, field::ENTIRE).fetch_sub(1, Relaxed) == 0 {
                    let still = if self.f.nr_pages_mapped {
                        (nr_mapped.fetch_sub(ENTIRELY_MAPPED, Relaxed) - ENTIRELY_MAPPED) as u64
                    } else {
                        pages_mapped_by_ptes(f)
                    };
                    removed.unmapped_pages = f.nr_pages() - still;
                    removed.deferred_split = still > 0 && still < f.nr_pages();
                }
                removed
            }
        }
    }

    fn mapcount(&self, f: Folio) -> u64 {
        match self.f.total {
            Total::All => (w(f, field::TOTAL).load(Relaxed) + 1) as u64,
            Total::Ptes => w(f, field::TOTAL).load(Relaxed) as u64 + self.entire_mapcount(f),
            // folio_mapcount() before 6.10: a scan over every page.
            Total::None => {
                let ptes: u64 = (0..f.nr_pages()).map(|i| (f.page(i).mapcount.load(Relaxed) + 1) as u64).sum();
                ptes + self.entire_mapcount(f)
            }
        }
    }

    fn entire_mapcount(&self, f: Folio) -> u64 {
        (w(f, field::ENTIRE).load(Relaxed) + 1) as u64
    }

    fn page_mapcount(&self, f: Folio, i: u64) -> Option<u64> {
        Some((f.page(i).mapcount.load(Relaxed) + 1) as u64 + self.entire_mapcount(f))
    }

    fn maybe_mapped_shared(&self, f: Folio) -> bool {
        if self.f.rmap_sums.is_some() {
            return self.mapcount(f) > 1 && self.sole_owner(f).is_none();
        }
        let m = self.mapcount(f);
        if self.f.mm_ids {
            m > 1 && shared(f)
        } else {
            m > 1
        }
    }

    fn likely_mapped_shared(&self, f: Folio, i: u64) -> bool {
        let page_shared = |i| self.page_mapcount(f, i).is_some_and(|n| n > 1);
        match self.f.guess {
            Guess::Page => page_shared(i),
            Guess::FirstPage => page_shared(0),
            Guess::Likely => {
                let m = self.mapcount(f);
                m > 1 && (self.entire_mapcount(f) > 0 || m > f.nr_pages() || f.page(0).mapcount.load(Relaxed) > 0)
            }
            Guess::Design => self.maybe_mapped_shared(f),
        }
    }

    fn can_reuse(&self, f: Folio, mm: MmId) -> bool {
        if self.f.rmap_sums.is_some() {
            // Reuse when this MM maps every mapping and nothing else holds a
            // reference (the seed's rule; no "large mapcount > 1" clause).
            return self.sole_owner(f) == Some(mm) && self.mapcount(f) == f.refcount() as u64;
        }
        if !self.f.mm_ids {
            return false; // before 6.15 a large anon folio is always copied
        }
        let m = self.mapcount(f);
        if m <= 1 || shared(f) || m != f.refcount() as u64 {
            return false;
        }
        let _lock = BitSpinLock::lock(&f.page(1).ids, field::LOCK_BIT);
        let ids = f.page(1).ids.load(Relaxed);
        let ok = !shared(f) && self.mapcount(f) == f.refcount() as u64;
        debug_assert!(!ok || slot_id(ids, 0) == mm || slot_id(ids, 1) == mm);
        ok
    }

    fn verify(&self, f: Folio, truth: &FolioTruth) -> Vec<String> {
        let mut bad = Vec::new();
        let total = truth.total() as i64;
        let ptes: i64 = truth.pte.iter().map(|&n| n as i64).sum();
        match self.f.total {
            Total::All => {
                let large = w(f, field::TOTAL).load(Relaxed) as i64 + 1;
                if large != total {
                    bad.push(format!("large mapcount {large}, page tables say {total}"));
                }
            }
            Total::Ptes => {
                let sub = w(f, field::TOTAL).load(Relaxed) as i64;
                if sub != ptes {
                    bad.push(format!("subpages mapcount {sub}, page tables say {ptes} PTE mappings"));
                }
            }
            Total::None => {}
        }
        if self.mapcount(f) as i64 != total {
            bad.push(format!("folio_mapcount {}, page tables say {total}", self.mapcount(f)));
        }
        let entire = self.entire_mapcount(f) as u32;
        if entire != truth.pmd {
            bad.push(format!("entire mapcount {entire}, page tables say {}", truth.pmd));
        }
        let mut pages_mapped = 0;
        for (i, &n) in truth.pte.iter().enumerate() {
            let m = f.page(i as u64).mapcount.load(Relaxed) + 1;
            if m as u32 != n {
                bad.push(format!("page {i} mapcount {m}, page tables say {n}"));
            }
            pages_mapped += (n > 0) as i32;
        }
        if self.f.nr_pages_mapped {
            let want = pages_mapped + if truth.pmd > 0 { ENTIRELY_MAPPED } else { 0 };
            let have = w(f, field::NR_PAGES_MAPPED).load(Relaxed);
            if have != want {
                bad.push(format!("_nr_pages_mapped {have:#x}, page tables say {want:#x}"));
            }
        }
        if self.f.mm_ids {
            // Slot rules (KERNEL-REFERENCE §2.5 sanity checks).
            let ids = f.page(1).ids.load(Relaxed);
            let mut occupied = 0;
            let mut slot_sum = 0i64;
            for s in 0..2 {
                let id = slot_id(ids, s);
                let c = w(f, field::SLOT0 + s).load(Relaxed);
                if (id == 0) != (c == -1) {
                    bad.push(format!("slot {s}: id {id} with count {c}"));
                }
                if id != 0 {
                    occupied += 1;
                    slot_sum += c as i64 + 1;
                    if !truth.per_mm.contains_key(&id) {
                        bad.push(format!("slot {s} names MM {id}, which maps nothing of the folio"));
                    }
                }
            }
            let sh = shared(f);
            if total == 0 && sh {
                bad.push("shared bit set on an unmapped folio".into());
            }
            if occupied == 2 && !sh {
                bad.push("two occupied slots but the shared bit is clear".into());
            }
            if slot_sum > total {
                bad.push(format!("slot counts sum to {slot_sum} > large mapcount {total}"));
            }
        }
        if let Some(c) = self.f.rmap_sums {
            let mut want = vec![0u64; c.count(f.order())];
            for (&id, &n) in &truth.per_mm {
                for (s, &v) in want.iter_mut().zip(c.values(id as u64, f.order()).iter()) {
                    *s = s.wrapping_add((n as u64).wrapping_mul(v));
                }
            }
            let (_, have) = self.sums(c, f);
            if have != want {
                bad.push(format!("rmap sums {have:?}, page tables say {want:?}"));
            }
            if !AtomicSeqcount(w(f, field::SEQCOUNT)).is_idle() {
                bad.push("a writer is still inside the rmap seqcount".into());
            }
            let owner = self.sole_owner(f);
            let truly = (truth.per_mm.len() == 1).then(|| *truth.per_mm.keys().next().unwrap());
            if total > 0 && total <= f.nr_pages() as i64 && owner != truly {
                bad.push(format!("sole owner {owner:?}, page tables say {truly:?}"));
            }
        }
        if truth.per_mm.len() > 1 && !self.maybe_mapped_shared(f) {
            bad.push(format!("answered exclusive while {} MMs map the folio (wrong-exclusive)", truth.per_mm.len()));
        }
        bad
    }

    fn cost(&self, _f: Folio, first: u64, nr: u64, level: Level) -> Cost {
        let pte = level == Level::Pte;
        let mut c = Cost::default();
        // Per-page _mapcount (PTE) or _entire_mapcount (PMD).
        c.rmw += if pte { nr } else { 1 };
        if self.f.nr_pages_mapped {
            c.rmw += 1;
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
                let exclusive = LAST_EXCLUSIVE.with(|e| e.get());
                c.locks += 1;
                // Entering (one compare-exchange); leaving, the mapcount and
                // each sum are plain when alone, atomic otherwise.
                c.rmw += if exclusive { 1 } else { 1 + 1 + 1 + self.sum_pages(_f) };
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
            lines += (2..=self.sum_pages(_f)).filter(|&p| !in_range(p)).count() as u64;
        }
        c.lines = lines;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{Config, Machine};

    /// (rmw, locks, lines) of adding a batch of 512 PTEs of an order-9 folio,
    /// then a single PTE of page 5.
    fn costs(name: &str) -> [(u64, u64, u64); 2] {
        let m = Machine::new(Config { memory: 16 << 20, mapcount: name.into(), ..Config::default() }).unwrap();
        let f = m.alloc_folio(9).unwrap();
        let d = design_by_name(name).unwrap();
        d.add(f, 0, 512, Level::Pte, 1);
        let batch = d.cost(f, 0, 512, Level::Pte);
        d.add(f, 5, 1, Level::Pte, 1);
        let single = d.cost(f, 5, 1, Level::Pte);
        d.remove(f, 5, 1, Level::Pte, 1);
        d.remove(f, 0, 512, Level::Pte, 1);
        m.folio_put_refs(f, 1);
        [(batch.rmw, batch.locks, batch.lines), (single.rmw, single.locks, single.lines)]
    }

    #[test]
    fn costs_follow_each_era_s_fields() {
        assert_eq!(costs("subpage"), [(512, 0, 512), (1, 0, 1)], "per-page mapcounts only");
        assert_eq!(costs("nr-mapped"), [(513, 0, 512), (2, 0, 2)], "+ _nr_pages_mapped in page 1");
        assert_eq!(costs("large-mapcount"), [(514, 0, 512), (3, 0, 2)], "+ _large_mapcount");
        assert_eq!(costs("compound-locked"), [(514, 1, 512), (3, 1, 2)], "+ the compound lock and subpages_mapcount");
        assert_eq!(costs("mm-id"), [(514, 1, 512), (3, 1, 2)], "the bit lock replaces the large-mapcount atomic");
        assert_eq!(
            costs("rmap-id-powersum"),
            [(514, 1, 512), (3, 1, 3)],
            "alone in the seqcount: plain sums; page 2 too"
        );
    }
}
