//! Mapcount designs: how a folio counts its page-table mappings and answers
//! "is it mapped by more than one address space?".
//!
//! Small folios count in the head page's `_mapcount` the same way in every
//! design (handled by [`crate::rmap`]); a [`MapcountDesign`] owns the fields of
//! large folios. [`Design`] names the seven designs foliomm carries; all of
//! them keep a mapcount per page and are one implementation with per-era
//! features (`eras`): the fields (`fields`), the large mapcount with its
//! MM-ID slots or rmap-ID sums (`large_mapcount`), the rmap operations
//! (`page_mapcounts`) with 6.1's `PG_double_map` (`double_map`) and 6.15's
//! `CONFIG_NO_PAGE_MAPCOUNT` (`no_page_mapcount`), the checks against the
//! ground truth (`verify`) and what each operation costs (`cost`). [`construction`] holds the rmap-ID
//! constructions and their prover, [`mm_id`] the MM-ID allocator.
#![warn(missing_docs)]

/// An enum whose variants carry their names (`set ... NAME`, `--... NAME`):
/// `ALL` in order, `name()`, `parse()`, `names()`, and under the `clap` feature a `ValueEnum`
/// taking those names.
macro_rules! named_enum {
    ($(#[$emeta:meta])* $Name:ident { $($(#[$meta:meta])* $variant:ident = $name:literal),* $(,)? }) => {
        $(#[$emeta])*
        #[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
        pub enum $Name {
            $($(#[$meta])* #[cfg_attr(feature = "clap", value(name = $name))] $variant,)*
        }

        impl $Name {
            /// Every value, in order.
            pub const ALL: &'static [$Name] = &[$($Name::$variant),*];

            /// The value's name.
            pub fn name(self) -> &'static str {
                match self {
                    $($Name::$variant => $name,)*
                }
            }

            /// The value called `name`.
            pub fn parse(name: &str) -> Option<$Name> {
                Self::ALL.iter().copied().find(|v| v.name() == name)
            }

            /// Every name, for error messages.
            pub fn names() -> String {
                Self::ALL.iter().map(|v| v.name()).collect::<Vec<_>>().join(", ")
            }
        }
    };
}

mod compound_lock;
pub mod construction;
mod cost;
mod double_map;
mod eras;
mod fields;
mod large_mapcount;
mod memmap_space;
pub mod mm_id;
mod no_page_mapcount;
mod page_mapcounts;
mod stage;
mod verify;

use std::collections::BTreeMap;

use crate::folio::Folio;
use crate::release::KernelVersion;

pub use compound_lock::CompoundLock;
pub use eras::PageMapcounts;
pub use fields::ENTIRELY_MAPPED;
pub use memmap_space::MemmapSpace;
pub use mm_id::{MmId, MmIds, RmapMm};
pub use stage::RmapIdStage;

/// Which page-table level a mapping uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// `nr` PTEs mapping consecutive pages.
    Pte,
    /// One PMD mapping the whole (PMD-sized) folio.
    Pmd,
}

/// What an rmap addition did to the folio (`__folio_add_rmap` results).
#[derive(Clone, Copy, Debug, Default)]
pub struct Added {
    /// Pages that became mapped (`NR_ANON_MAPPED` / `NR_FILE_MAPPED`
    /// delta): with per-page mapcounts, pages no PTE or PMD mapped before;
    /// without (`CONFIG_NO_PAGE_MAPCOUNT`), the whole folio when it was
    /// mapped nowhere.
    pub newly_mapped: u64,
    /// What the addition cost.
    pub cost: Cost,
}

/// What an rmap removal did to the folio (`__folio_remove_rmap` results).
#[derive(Clone, Copy, Debug, Default)]
pub struct Removed {
    /// Pages that stopped being mapped (`NR_ANON_MAPPED` / `NR_FILE_MAPPED`
    /// delta, the mirror image of [`Added::newly_mapped`]).
    pub unmapped_pages: u64,
    /// Queue the folio for deferred split: it stays mapped in part (6.10+),
    /// or, in earlier eras, a PTE unmap unmapped one of its pages.
    pub deferred_split: bool,
    /// What the removal cost.
    pub cost: Cost,
}

/// The mappings of one folio as the page tables hold them: what a design's
/// fields must agree with. The checker builds it from page-table walks.
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
    /// All mappings of the folio: what `folio_mapcount` must report.
    pub fn total(&self) -> u32 {
        self.pte.iter().sum::<u32>() + self.pmd
    }
}

/// The cost of one rmap operation on a large folio, counted as the kernel's
/// code for the design performs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    /// Atomic read-modify-writes (a bit-spinlock unlock is a plain store).
    pub rmw: u64,
    /// Lock acquisitions (bit spinlocks, atomic seqcount entries).
    pub locks: u64,
    /// Distinct memmap descriptors, each a 64-byte cache line.
    pub lines: u64,
    /// Rounds spun waiting for those locks.
    pub spins: u64,
    /// Exclusive seqcount entries lost to another writer (a failed
    /// compare-exchange, or an add-return that backed off).
    pub lost: u64,
}

/// A design's answer to "is the folio mapped by more than one MM?"
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedAnswer {
    /// Only one MM maps it.
    Exclusive,
    /// Another MM may map it (certainly does, for the precise designs).
    MaybeShared,
    /// Maybe shared: rmap writers were at work and the reader stopped early
    /// instead of retrying (seed 000's reader, see `mapped_shared_once`).
    Busy,
}

impl SharedAnswer {
    /// Whether the answer is anything but "exclusive".
    pub fn maybe_shared(self) -> bool {
        self != SharedAnswer::Exclusive
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
    /// The smallest order a large folio may have under the design: 1 for
    /// most (an order-1 folio keeps its fields in page 1); seed 000's rmap
    /// sums need more tail pages than an order-1 folio has.
    fn min_large_order(&self) -> u32 {
        1
    }
    /// Initialises the fields of a freshly allocated large folio (`prep_compound_head`).
    fn prep(&self, f: Folio);
    /// Returns a description of each field of the second page not back at
    /// its initial value (`free_tail_page_prepare` "bad page" checks);
    /// empty when freeable. Each page's `_mapcount` is checked as its
    /// descriptor is cleared (`clear_descriptors`).
    fn check_freeable(&self, f: Folio) -> Vec<String>;
    /// Clears what a design stopped keeping for the unmapped `f` (stage
    /// `all-give-up`'s rmap sums), before it is freed or split; nothing for
    /// the others.
    fn forget_untracked(&self, _f: Folio) {}
    /// A new MM `mm` (`mm_init`): the rmap-ID designs from patch 11 on
    /// compute its sub-IDs (`mm_alloc_rmap_id`); nothing for the others.
    fn mm_created(&self, _mm: &RmapMm) {}
    /// First mapping of a new folio by `mm`: all pages by PTEs, or one PMD
    /// (`folio_add_new_anon_rmap`).
    fn add_new(&self, f: Folio, level: Level, mm: RmapMm);
    /// Adds `nr` PTE mappings of pages `first..first+nr`, or one PMD mapping;
    /// returns the pages it newly mapped and what that cost.
    fn add(&self, f: Folio, first: u64, nr: u64, level: Level, mm: RmapMm) -> Added;
    /// Removes mappings, the mirror image of [`MapcountDesign::add`].
    fn remove(&self, f: Folio, first: u64, nr: u64, level: Level, mm: RmapMm) -> Removed;
    /// `folio_mapcount`: page-table entries (PTEs and PMDs) mapping the folio.
    fn mapcount(&self, f: Folio) -> u64;
    /// `folio_entire_mapcount`: PMD mappings.
    fn entire_mapcount(&self, f: Folio) -> u64;
    /// `folio_precise_page_mapcount`: entries mapping page `i`, if the design
    /// keeps per-page counts.
    fn page_mapcount(&self, f: Folio, i: u64) -> Option<u64>;
    /// `folio_maybe_mapped_shared`: exclusive only if one MM maps the folio;
    /// maybe shared although one MM maps it for imprecise designs, and for
    /// rmap-id while writers are at work.
    fn maybe_mapped_shared(&self, f: Folio) -> SharedAnswer;
    /// Whether [`Self::maybe_mapped_shared`] can tell one MM mapping a large
    /// folio many times from several MMs (the rmap-ID designs from their
    /// rmap-id stage, mm-id); when false, "maybe shared" for a large folio
    /// mapped more than once says only that.
    fn knows_sharers(&self) -> bool;
    /// The era's guess whether the folio holding page `i` is mapped by more
    /// than one MM, as policy code asks it; may be wrong either way before
    /// 6.15.
    fn likely_mapped_shared(&self, f: Folio, i: u64) -> bool;
    /// Whether a write fault by `mm` may reuse the whole large anon folio
    /// (`__wp_can_reuse_large_anon_folio`); false means copy.
    fn can_reuse(&self, f: Folio, mm: MmId) -> bool;
    /// Linux 6.1's count updates for a PMD split of the anon `f`, which
    /// calls no rmap function (`__split_huge_pmd_locked` with
    /// `PG_double_map`): performs them and returns their cost; `None` for
    /// the designs whose split adds the PTE mappings and removes the PMD's.
    fn split_pmd(&self, _f: Folio) -> Option<Cost> {
        None
    }
    /// Whether a PMD split adds its PTE mappings in one call
    /// (`__split_huge_pmd_locked` from 6.8 and seed 000's patch 14) rather
    /// than page by page.
    fn batches_pmd_split(&self) -> bool;
    /// Compares the design's fields with the ground truth; returns violations.
    fn verify(&self, f: Folio, truth: &FolioTruth) -> Vec<String>;
    /// The design's fields of large folio `f` by Linux's names, raw (biased
    /// as Linux stores them), for traces; only the fields the design keeps.
    fn fields(&self, f: Folio) -> Vec<(String, i64)>;
}

named_enum! {
    /// The mapcount designs foliomm carries, oldest first: the one name
    /// table the scenario parser, the command line and the benchmarks use.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
    Design {
    /// Linux <= 6.1: per-page `_mapcount` + compound mapcount.
    Subpage = "subpage",
    /// Seed 003 (6.2-rc): + subpages mapcount, all under a bit spinlock.
    CompoundLocked = "compound-locked",
    /// Linux 6.2-6.9: `_nr_pages_mapped` + `ENTIRELY_MAPPED`, atomics only.
    NrMapped = "nr-mapped",
    /// Linux 6.10-6.14: + `_large_mapcount`.
    LargeMapcount = "large-mapcount",
    /// Seed 000's RFC: rmap-ID sums with the RFC's sub-IDs under an atomic seqcount.
    RmapId = "rmap-id",
    /// Seed 000's tracking with the power-sum construction.
    RmapIdPowersum = "rmap-id-powersum",
    /// Linux 6.15+ (the default): two MM-ID slots and the "maybe shared" bit.
    MmId = "mm-id",
    }
}

impl Design {
    /// The implementation of the design (at seed 000's last stage).
    pub fn implementation(self) -> &'static dyn MapcountDesign {
        self.implementation_at(RmapIdStage::All)
    }

    /// The implementation of the design; the rmap-ID designs as of `stage`
    /// of seed 000's series, the others whatever `stage` says.
    pub fn implementation_at(self, stage: RmapIdStage) -> &'static dyn MapcountDesign {
        match self {
            Design::RmapId => &eras::RMAP_ID_STAGES[0][stage as usize],
            Design::RmapIdPowersum => &eras::RMAP_ID_STAGES[1][stage as usize],
            _ => &eras::DESIGNS[self as usize],
        }
    }

    /// The design built with `CONFIG_NO_PAGE_MAPCOUNT` (6.15+): `mm-id`
    /// without per-page mapcounts; `None` for the others, which cannot go
    /// without.
    pub fn without_page_mapcount(self) -> Option<&'static dyn MapcountDesign> {
        (self == Design::MmId).then_some(&eras::MM_ID_NO_PAGE_MAPCOUNT as &dyn MapcountDesign)
    }

    /// Whether the design reads seed 000's stage setting.
    pub fn has_stages(self) -> bool {
        matches!(self, Design::RmapId | Design::RmapIdPowersum)
    }

    /// The release this design is paired with unless a kernel version is
    /// chosen: `subpage` and seed 003's `compound-locked` 6.1, `nr-mapped`
    /// 6.8 (seed 001's kernel), `large-mapcount` 6.13 (the last of its era
    /// before 6.14's large tmpfs write folios), seed 000's RFC 6.8 (it was
    /// written on the 6.8 merge window's mm tree), `mm-id` the newest.
    pub fn release(self) -> KernelVersion {
        match self {
            Design::Subpage | Design::CompoundLocked => KernelVersion::OLDEST,
            Design::NrMapped => KernelVersion::new(6, 8),
            Design::LargeMapcount => KernelVersion::new(6, 13),
            Design::RmapId | Design::RmapIdPowersum => KernelVersion::new(6, 8),
            Design::MmId => KernelVersion::NEWEST,
        }
    }

    /// The design Linux `v` uses: up to 6.1 `subpage`, 6.2-6.9
    /// `nr-mapped`, 6.10-6.14 `large-mapcount`, then `mm-id`.
    pub fn of_release(v: KernelVersion) -> Design {
        match (v.major, v.minor) {
            (..=5, _) | (6, ..=1) => Design::Subpage,
            (6, 2..=9) => Design::NrMapped,
            (6, 10..=14) => Design::LargeMapcount,
            _ => Design::MmId,
        }
    }
}

impl Default for Design {
    /// The host kernel's design (Linux 6.15+).
    fn default() -> Design {
        Design::MmId
    }
}

impl std::fmt::Display for Design {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}
