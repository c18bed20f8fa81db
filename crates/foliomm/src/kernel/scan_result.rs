//! The result codes of a collapse attempt (mm/khugepaged.c `enum
//! scan_result`), kept beside the counters that count them; the collapse
//! itself is in [`crate::memory::khugepaged`].

use super::{Kernel, Stats};

/// `enum scan_result`: why a range was (not) collapsed. Counted per result
/// (`collapse_scan[name]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanResult {
    /// `SCAN_FAIL`: anything else (a fault during swap-in, a changed PMD).
    Fail,
    /// `SCAN_SUCCEED`: collapsed (or, from the scan, worth collapsing).
    Succeed,
    /// `SCAN_PMD_NULL`: no page table above the PMD.
    PmdNull,
    /// `SCAN_PMD_NONE`: no PTE table: nothing mapped.
    PmdNone,
    /// `SCAN_PMD_MAPPED`: a huge PMD maps the range already.
    PmdMapped,
    /// `SCAN_EXCEED_NONE_PTE`: more none (or zero-page) PTEs than
    /// `max_ptes_none`, or any in a VMA registered with a userfaultfd.
    ExceedNonePte,
    /// `SCAN_PTE_UFFD_WP`: a PTE userfaultfd write-protects.
    PteUffdWp,
    /// `SCAN_EXCEED_SWAP_PTE`: more swap PTEs than `max_ptes_swap`.
    ExceedSwapPte,
    /// `SCAN_EXCEED_SHARED_PTE`: more PTEs of (maybe) shared folios than `max_ptes_shared`.
    ExceedSharedPte,
    /// `SCAN_PTE_NON_PRESENT`: a PTE still not present when isolating.
    PteNonPresent,
    /// `SCAN_PAGE_RO`: no PTE writable (before 6.18).
    PageRo,
    /// `SCAN_LACK_REFERENCED_PAGE`: khugepaged found too few young PTEs.
    LackReferencedPage,
    /// `SCAN_PAGE_NULL`: a special PTE (`vm_normal_page` gives none).
    PageNull,
    /// `SCAN_PAGE_LRU`: a folio not on an LRU list (isolated by someone else).
    PageLru,
    /// `SCAN_PAGE_LOCK`: a folio locked by someone else.
    PageLock,
    /// `SCAN_PAGE_ANON`: a folio that is not anonymous, or a VMA without an anon_vma.
    PageAnon,
    /// `SCAN_PAGE_COUNT`: a folio held by more than its mappings (pinned).
    PageCount,
    /// `SCAN_VMA_NULL`: no VMA at the address any more.
    VmaNull,
    /// `SCAN_VMA_CHECK`: the VMA may not have a THP.
    VmaCheck,
    /// `SCAN_ADDRESS_RANGE`: the PMD range is not inside the VMA.
    AddressRange,
    /// `SCAN_DEL_PAGE_LRU`: a folio could not be taken off its LRU list.
    DelPageLru,
    /// `SCAN_ALLOC_HUGE_PAGE_FAIL`: no PMD-sized folio could be allocated.
    AllocHugePageFail,
    /// `SCAN_PTE_MAPPED_HUGEPAGE`: the file range is one PMD-sized folio
    /// already (or was just collapsed): map it by the PMD.
    PteMappedHugepage,
    /// `SCAN_TRUNCATED`: the file has no page in the range.
    Truncated,
}

impl ScanResult {
    /// Every result, in counter order.
    pub const ALL: [ScanResult; 24] = [
        Self::Fail,
        Self::Succeed,
        Self::PmdNull,
        Self::PmdNone,
        Self::PmdMapped,
        Self::ExceedNonePte,
        Self::PteUffdWp,
        Self::ExceedSwapPte,
        Self::ExceedSharedPte,
        Self::PteNonPresent,
        Self::PageRo,
        Self::LackReferencedPage,
        Self::PageNull,
        Self::PageLru,
        Self::PageLock,
        Self::PageAnon,
        Self::PageCount,
        Self::VmaNull,
        Self::VmaCheck,
        Self::AddressRange,
        Self::DelPageLru,
        Self::AllocHugePageFail,
        Self::PteMappedHugepage,
        Self::Truncated,
    ];

    /// The kernel's name without `SCAN_`, in lower case.
    pub fn name(self) -> &'static str {
        [
            "fail",
            "succeed",
            "pmd_null",
            "pmd_none",
            "pmd_mapped",
            "exceed_none_pte",
            "pte_uffd_wp",
            "exceed_swap_pte",
            "exceed_shared_pte",
            "pte_non_present",
            "page_ro",
            "lack_referenced_page",
            "page_null",
            "page_lru",
            "page_lock",
            "page_anon",
            "page_count",
            "vma_null",
            "vma_check",
            "address_range",
            "del_page_lru",
            "alloc_huge_page_fail",
            "pte_mapped_hugepage",
            "truncated",
        ][self as usize]
    }

    /// Counts the result (`collapse_scan[name]`) and returns it.
    pub(crate) fn count(self, k: &Kernel) -> ScanResult {
        Stats::inc(&k.stats.collapse_scan[self as usize]);
        self
    }
}
