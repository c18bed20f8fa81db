//! A broken invariant as the checker reports it: a category to filter on,
//! what it concerns, and the line it prints.
#![warn(missing_docs)]

use std::fmt;

use crate::arch::Pfn;
use crate::mapcount::MmId;

/// One violation found by [`super::check_machine`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Violation {
    /// The rule broken, for filtering.
    pub kind: ViolationKind,
    /// What the violation concerns.
    pub subject: Subject,
    /// The whole report line, subject included, as `Display` prints it.
    pub detail: String,
}

impl Violation {
    /// A violation of `kind` about `subject` that prints as `detail`.
    pub fn new(kind: ViolationKind, subject: Subject, detail: String) -> Violation {
        Violation { kind, subject, detail }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

/// The kind of rule broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    /// Table frames, deposits and leaf entries: shape and what they point to.
    PageTable,
    /// A mapping outside any VMA or beyond what its protection allows.
    Vma,
    /// `MM_ANONPAGES` and `MM_SHMEMPAGES` against the page tables.
    Rss,
    /// The machine's `NR_ANON_MAPPED` and `NR_FILE_MAPPED` against the page
    /// tables.
    Vmstat,
    /// shmem page caches: their folios, and file folios mapped from none.
    PageCache,
    /// Folio and page mapcounts, the design's fields, the anon rmap.
    Mapcount,
    /// AnonExclusive pages, and "exclusive" answers for a shared folio.
    Exclusive,
    /// The precision report's shadow against the page tables.
    Precision,
    /// `refcount` and `_pincount` against mappings and GUP references.
    Refcount,
    /// The buddy free lists and the frame accounting.
    Allocator,
    /// An allocated folio or page table that nothing reaches.
    Leak,
    /// A "bad page" report from a free.
    BadPage,
    /// A CPU used a TLB entry whose frame had been freed.
    UseAfterFree,
    /// Swap slots' counts against the swap entries and the swap cache.
    Swap,
    /// The anon rmap (anon_vma trees, `folio->index`) and the LRU lists
    /// against the page tables.
    Rmap,
}

impl ViolationKind {
    /// The kind's snake_case name (as serialized).
    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::PageTable => "page_table",
            ViolationKind::Vma => "vma",
            ViolationKind::Rss => "rss",
            ViolationKind::Vmstat => "vmstat",
            ViolationKind::PageCache => "page_cache",
            ViolationKind::Mapcount => "mapcount",
            ViolationKind::Exclusive => "exclusive",
            ViolationKind::Precision => "precision",
            ViolationKind::Refcount => "refcount",
            ViolationKind::Allocator => "allocator",
            ViolationKind::Leak => "leak",
            ViolationKind::BadPage => "bad_page",
            ViolationKind::UseAfterFree => "use_after_free",
            ViolationKind::Swap => "swap",
            ViolationKind::Rmap => "rmap",
        }
    }
}

/// What a violation concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Subject {
    /// An address space, at `addr` when the violation has one.
    Mm {
        /// The MM's `mm_id`.
        mm: MmId,
        /// The virtual address concerned, if any.
        addr: Option<u64>,
    },
    /// The folio headed by this frame.
    Folio(Pfn),
    /// One frame: a page, a page table, a free frame.
    Frame(Pfn),
    /// The machine's totals.
    Machine,
}
