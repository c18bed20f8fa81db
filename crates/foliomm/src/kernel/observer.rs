//! The observer interface: how bookkeeping above the kernel (the checker's
//! GUP table, the precision report's shadow of mappings) hears of events
//! without the lower layers calling up. The rmap functions report every
//! mapping change and every sharing decision, GUP every reference.
//!
//! Linux has no such hooks; it is the model's instrumentation. The trait is
//! defined here, beside the [`super::Kernel`] that carries it to every call,
//! because that context sits below rmap and GUP.

use crate::arch::Pfn;
use crate::folio::Folio;
use crate::mapcount::MmId;

use super::Kernel;

/// Who asked "is this folio mapped by more than one process?" and acted on
/// the answer (seed 000's list: COW, swap-out, split, migration...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consumer {
    /// A write fault's reuse of a large anon folio (`wp_can_reuse_anon_folio`).
    CowReuse,
    /// `MADV_PAGEOUT`/`MADV_COLD` of a folio the range covers whole
    /// (`folio_maybe_mapped_shared` for a PMD; `folio_mapcount !=
    /// folio_nr_pages` for PTEs; `page_mapcount != 1` in 6.1).
    Pageout,
    /// `MADV_PAGEOUT`/`MADV_COLD` splitting a folio the range covers in part
    /// (`folio_likely_mapped_shared` / `folio_maybe_mapped_shared`).
    PageoutSplit,
    /// khugepaged counting the PTEs of a large folio against
    /// `max_ptes_shared` (`hpage_collapse_scan_pmd`: `folio_maybe_mapped_shared`
    /// from 6.15, `folio_likely_mapped_shared` from 6.10, `page_mapcount > 1`
    /// before; judged at the folio's first PTE in the range).
    Collapse,
    /// `move_pages` without `MPOL_MF_MOVE_ALL` leaving a large folio (maybe)
    /// mapped shared where it is (`__add_folio_for_migration`, asked as
    /// khugepaged asks, at the page named).
    Migrate,
    /// NUMA balancing: the scan leaving a (maybe) shared folio of a COW
    /// mapping alone (`prot_numa_skip`), and the hinting fault flagging a
    /// folio of a shared mapping `TNF_SHARED` (`numa_migrate_check`).
    NumaBalancing,
    /// `MADV_FREE` leaving a folio alone that another process may map
    /// (`madvise_free_huge_pmd`: `folio_maybe_mapped_shared`; a folio
    /// covered in part: `folio_likely_mapped_shared` before splitting it; a
    /// dirty or swap-cached one: `folio_mapcount != folio_nr_pages`; 6.1:
    /// `folio_mapcount != 1`).
    LazyFree,
}

impl Consumer {
    /// Every consumer, in table order.
    pub const ALL: [Consumer; 7] = [
        Consumer::CowReuse,
        Consumer::Pageout,
        Consumer::PageoutSplit,
        Consumer::Collapse,
        Consumer::Migrate,
        Consumer::NumaBalancing,
        Consumer::LazyFree,
    ];

    /// The consumer's name in counters and tables.
    pub fn name(self) -> &'static str {
        ["cow_reuse", "pageout", "pageout_split", "collapse", "migrate", "numa", "lazyfree"][self as usize]
    }
}

impl Kernel {
    /// Tells the precision report that `consumer` took the large folio `f`
    /// for (maybe) mapped `shared`; returns the answer.
    pub fn decided(&self, consumer: Consumer, f: Folio, shared: bool) -> bool {
        self.observe(|o| o.shared_decided(self, consumer, f, shared));
        shared
    }
}

/// Told of events as they happen; every method defaults to ignoring them.
pub trait Observer: Send + Sync {
    /// `delta` mappings (PTEs or one PMD each) of the folio headed by
    /// `head` were added to (or, negative, removed from) MM `mm`.
    fn mapped(&self, head: Pfn, mm: MmId, delta: i64) {
        let _ = (head, mm, delta);
    }

    /// A GUP reference (FOLL_PIN, else FOLL_GET) on the folio headed by
    /// `head` was taken (`delta` 1) or released (-1).
    fn gup(&self, head: Pfn, foll_pin: bool, delta: i32) {
        let _ = (head, foll_pin, delta);
    }

    /// A write fault by `mm` on the large anon folio `f`, not AnonExclusive,
    /// decided to reuse it (`reused`) or to copy.
    fn cow_decided(&self, k: &Kernel, f: Folio, mm: MmId, reused: bool) {
        let _ = (k, f, mm, reused);
    }

    /// `consumer` acted on the answer that the large folio `f` is
    /// (`shared`) or is not mapped by more than one MM.
    fn shared_decided(&self, k: &Kernel, consumer: Consumer, f: Folio, shared: bool) {
        let _ = (k, consumer, f, shared);
    }

    /// An observation of the large folio `f` got the design's "maybe mapped
    /// shared?" answer and the era's policy guess.
    fn shared_answered(&self, k: &Kernel, f: Folio, maybe_shared: bool, likely_shared: bool) {
        let _ = (k, f, maybe_shared, likely_shared);
    }
}
