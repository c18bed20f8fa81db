//! The kernel-version axis: what changed between Linux releases apart from
//! how mapcounts are counted. A [`KernelVersion`] answers each question a
//! model path asks about its release ("does an anonymous mmap get a THP
//! boundary?"), with the release the behaviour came in and the kernel
//! function that does it. The mapcount design is a separate axis
//! ([`crate::mapcount::Design`]); each design names the release it is
//! paired with by default ([`crate::mapcount::Design::release`]), and any
//! pairing can be chosen (`set kernel 6.8`, `--kernel 6.8`).
#![warn(missing_docs)]

mod gup;
mod lru;
mod mlock;
mod shmem;
mod userfaultfd;

use std::fmt;

/// A Linux release, `major.minor` (stable updates do not change what is
/// modelled). Ordered, so that `v >= KernelVersion::new(6, 13)` reads as
/// "from 6.13 on".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct KernelVersion {
    /// The major number (`VERSION` in the kernel Makefile); 6 for every
    /// release modelled.
    pub major: u16,
    /// The minor number (`PATCHLEVEL`).
    pub minor: u16,
}

impl KernelVersion {
    /// The oldest release foliomm models: the guest referee's, the
    /// `subpage` design's.
    pub const OLDEST: KernelVersion = KernelVersion::new(6, 1);
    /// The newest release foliomm models: this machine's host kernel, and
    /// the default.
    pub const NEWEST: KernelVersion = KernelVersion::new(6, 18);

    /// Linux `major.minor`; not checked against the modelled range (see
    /// [`KernelVersion::parse`]).
    pub const fn new(major: u16, minor: u16) -> KernelVersion {
        KernelVersion { major, minor }
    }

    /// Every release modelled, oldest first.
    pub fn all() -> impl Iterator<Item = KernelVersion> {
        (Self::OLDEST.minor..=Self::NEWEST.minor).map(|minor| KernelVersion::new(Self::OLDEST.major, minor))
    }

    /// `"6.8"`, or a kernel release string such as `"6.1.0-47-amd64"` or
    /// `"6.18.2"` (the first two numbers count); `None` for anything else or
    /// a release outside [`KernelVersion::OLDEST`]..=[`KernelVersion::NEWEST`].
    pub fn parse(s: &str) -> Option<KernelVersion> {
        let mut parts = s.trim().split(['.', '-', '+']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(KernelVersion::new(major, minor)).filter(|v| (Self::OLDEST..=Self::NEWEST).contains(v))
    }

    /// Whether anonymous mappings may get a 2 MiB-aligned address at all
    /// (`thp_get_unmapped_area` for anonymous memory, efa7df3e3bb5 "mm:
    /// align larger anonymous mappings on THP boundaries"): 6.8 on. Before,
    /// the top-down area's randomized base is page-aligned only.
    pub fn aligns_anon_thp(self) -> bool {
        self >= KernelVersion::new(6, 8)
    }

    /// Whether a private anonymous mmap of `len` bytes with no hint gets a
    /// 2 MiB-aligned address (`__get_unmapped_area`): 6.8 to 6.11 when
    /// `len` is at least 2 MiB; from 6.12 only when it is a multiple of it
    /// (d4148aeab412, "limit THP alignment of anonymous mappings to
    /// PMD-aligned sizes"). `pmd` is the PMD size.
    pub fn aligns_anon_mapping(self, len: u64, pmd: u64) -> bool {
        match self {
            v if v >= KernelVersion::new(6, 12) => len.is_multiple_of(pmd),
            v if v.aligns_anon_thp() => len >= pmd,
            _ => false,
        }
    }

    /// Whether a write fault on the huge zero folio's PMD allocates a new
    /// THP (`do_huge_zero_wp_pmd`): 6.13 on. Before, `do_huge_pmd_wp_page`
    /// split the PMD into zero-page PTEs and copied the one page.
    pub fn allocates_thp_on_huge_zero_write(self) -> bool {
        self >= KernelVersion::new(6, 13)
    }

    /// Whether a tmpfs write or fallocate may allocate folios of any order
    /// the mount allows (`shmem_get_folio` with the write size): 6.14 on.
    /// Before, PMD-sized folios only.
    pub fn writes_large_shmem_folios(self) -> bool {
        self >= KernelVersion::new(6, 14)
    }

    /// Whether reclaim writes a large shmem folio to swap whole
    /// (`shmem_writeout` with `CONFIG_THP_SWAP`, "mm: shmem: support large
    /// folio swap out"): 6.12 on. Before, `shmem_writepage` splits it
    /// first and its pages go one by one.
    pub fn swaps_out_large_shmem_folios(self) -> bool {
        self >= KernelVersion::new(6, 12)
    }

    /// Whether a large shmem swap entry is read back from a synchronous
    /// device (zram) as one folio of its order (`shmem_swap_alloc_folio`,
    /// "mm: shmem: skip swapcache for swapin of synchronous swap device"):
    /// 6.14 on by our reading, unsure of the exact release. Before, page by
    /// page, the entry split (`shmem_split_large_entry`).
    pub fn swaps_in_large_shmem_folios(self) -> bool {
        self >= KernelVersion::new(6, 14)
    }

    /// Whether debugfs `split_huge_pages` reads a target order after the
    /// range (6.8 on); before, it ignores one and splits to pages.
    pub fn split_huge_pages_takes_an_order(self) -> bool {
        self >= KernelVersion::new(6, 8)
    }

    /// Whether truncation splits a large folio around the page it must
    /// free into folios of falling orders (`folio_split`, buddy-style):
    /// 6.15 on. Before, `split_folio` into single pages.
    pub fn splits_folios_in_buddies(self) -> bool {
        self >= KernelVersion::new(6, 15)
    }

    /// Whether a fault maps a PMD-sized page-cache folio by a PMD only where
    /// the VMA allows THP (`do_set_pmd` checks `vma_thp_disabled`:
    /// MADV_NOHUGEPAGE, 2b0f922323cc "mm: don't install PMD mappings when
    /// THPs are disabled by the hw/process/vma"): 6.12 on. Before, any
    /// suitably aligned one was PMD-mapped, MADV_NOHUGEPAGE or not.
    pub fn pmd_maps_only_where_thp_allowed(self) -> bool {
        self >= KernelVersion::new(6, 12)
    }

    /// Whether a read fault's fault-around maps every large folio it meets
    /// whole, not only the pages inside its window, when the folio lies
    /// inside the VMA and one page table (`filemap_map_folio_range`,
    /// 357b92761d94, "mm/filemap: map entire large folio faultaround"):
    /// 6.18 on. For shmem also across `i_size` (7c9580f44f90 keeps that
    /// exception; other files only below it).
    pub fn maps_whole_folio_around(self) -> bool {
        self >= KernelVersion::new(6, 18)
    }

    /// Whether pagemap calls a hugetlb page exclusive by the folio's
    /// sharing and a shared PMD table (`pagemap_hugetlb_range`: not likely
    /// mapped shared and not `hugetlb_pmd_shared`; 88e4e47c1283, 6.10 on)
    /// rather than by `page_mapcount() == 1` as before, which counts a
    /// shared PMD table once.
    pub fn pagemap_hugetlb_by_sharing(self) -> bool {
        self >= KernelVersion::new(6, 10)
    }

    /// Whether zapping an anonymous page of a private hugetlb mapping its
    /// reservation owner made restores the page's reservation
    /// (`__unmap_hugepage_range`, df7a6d1f6405 "mm/hugetlb: restore the
    /// reservation if needed"): 6.9 on; Debian's 6.1.0-47 guest has no
    /// backport. Before, the page goes back to the pool unpromised and the
    /// owner's refault may find none.
    pub fn restores_hugetlb_reservation_at_zap(self) -> bool {
        self >= KernelVersion::new(6, 9)
    }

    /// Whether a VMA with an anon_vma and a neighbour without one merge
    /// whichever of them an operation changed (`is_mergeable_anon_vma`
    /// with `vma_had_uncowed_parents`, 879bca0a2c4f "mm/vma: fix incorrectly disallowed
    /// anonymous VMA merges"): 6.16 on. Before, the one without had to be
    /// the range being changed and the one with it the neighbour (the
    /// neighbour's `anon_vma_chain` had to be singular), so that, e.g.,
    /// munlock of a faulted part next to an unfaulted one leaves two VMAs.
    pub fn merges_into_vma_without_anon_vma(self) -> bool {
        self >= KernelVersion::new(6, 16)
    }

    /// Whether `break_ksm` (unmerging a KSM page) faults as an unshare
    /// (`FAULT_FLAG_UNSHARE`: the copy stays read-only and clean, 6.2 on,
    /// "mm/ksm: fix KSM COW breaking with userfaultfd-wp via
    /// FAULT_FLAG_UNSHARE"). 6.1 faults as a write: the copy is writable
    /// and dirty.
    pub fn break_ksm_unshares(self) -> bool {
        self >= KernelVersion::new(6, 2)
    }

    /// Whether ksmd checks a page's checksum before it searches the stable
    /// tree for it ("mm/ksm: don't waste time searching stable tree for
    /// fast changing page", 6.10; bracket 6.9-6.11 read): then a page equal
    /// to a KSM page joins it on its second visit, not its first.
    pub fn ksm_checksum_before_stable_search(self) -> bool {
        self >= KernelVersion::new(6, 10)
    }

    /// Whether a fork child's `ksm_merging_pages` starts at 0 (`ksm_fork`
    /// resets the counters `dup_mm` copied; 6.15 on, bracket 6.14-6.18
    /// read). Before, the child starts with its parent's count.
    pub fn ksm_fork_resets_counters(self) -> bool {
        self >= KernelVersion::new(6, 15)
    }

    /// Whether `MADV_DONTNEED` frees a PTE table it covered whole and left
    /// empty (`zap_pte_range` → `try_to_free_pte` with
    /// `zap_details.reclaim_pt`, 6375e95f381e "mm: pgtable: reclaim empty
    /// PTE page in madvise(MADV_DONTNEED)", `CONFIG_PT_RECLAIM`, default y
    /// on x86-64): 6.14 on. Before, the empty table stays until munmap or
    /// exit, so a later fault there maps PTEs even where a huge PMD would fit.
    pub fn reclaims_empty_pte_tables(self) -> bool {
        self >= KernelVersion::new(6, 14)
    }

    /// Whether `MADV_POPULATE_READ/WRITE` stops with ENOMEM at the first
    /// hole (`madvise_populate`'s own loop, 631426ba1d45 "mm/madvise: make
    /// MADV_POPULATE_(READ|WRITE) handle VM_FAULT_RETRY properly"): 6.9 on.
    /// Before, it went VMA by VMA (`madvise_walk_vmas`), populating every
    /// mapped part, and failed with ENOMEM at the end.
    pub fn madvise_populate_stops_at_a_hole(self) -> bool {
        self >= KernelVersion::new(6, 9)
    }

    /// Whether `do_swap_page` maps an exclusive page writable on a read
    /// fault too (Barry Song's "mm: map swap-in pages writable when
    /// possible"; 6.10 on by our reading of the series, unsure of the exact
    /// release). Before (6.1 checked), only a write fault maps it writable;
    /// a read fault maps it read-only and a later write takes a
    /// write-protect fault that reuses the page.
    pub fn swapin_maps_writable_on_read(self) -> bool {
        self >= KernelVersion::new(6, 10)
    }

    /// Whether a swap-in from a synchronous device (zram) may read a large
    /// folio whole (`alloc_swap_folio`: an mTHP order the VMA allows, the
    /// aligned range all swap entries of consecutive slots, none cached;
    /// "mm: support large folios swap-in for sync io devices"): 6.12 on by
    /// our reading, unsure of the exact release. Before, swap-in is page by
    /// page.
    pub fn swaps_in_large_folios(self) -> bool {
        self >= KernelVersion::new(6, 12)
    }

    /// Whether splitting a mapped anon THP maps its zero-filled pages to
    /// the shared zero page and frees them (`remap_page` with
    /// `RMP_USE_SHARED_ZEROPAGE`, "mm: remap unused subpages to shared
    /// zeropage when splitting isolated thp"): 6.12 on. Before, every page
    /// stays mapped.
    pub fn split_maps_zero_pages_to_zero_page(self) -> bool {
        self >= KernelVersion::new(6, 12)
    }

    /// Whether /proc/PID/status reads the MM's RSS counters exactly
    /// (f1a7941243c1 "mm: convert mm's rss stats into percpu_counter"):
    /// 6.2 on. Before, `SPLIT_RSS_COUNTING` kept each task's changes in a
    /// per-task cache folded in every 64 events, so `VmSwap` and the `Rss*`
    /// lines could lag. The model counts exactly on every release.
    pub fn counts_rss_exactly(self) -> bool {
        self >= KernelVersion::new(6, 2)
    }

    /// How the policy paths ask whether a page is mapped by more than one
    /// process: khugepaged counting a PTE against `max_ptes_shared`, and
    /// `move_pages` leaving a page without `MPOL_MF_MOVE_ALL`:
    /// `page_mapcount(page) > 1` until 6.9, `folio_likely_mapped_shared`
    /// from 6.10 (David Hildenbrand's page_mapcount() clean-ups, "mm/khugepaged:
    /// replace page_mapcount() check by folio_likely_mapped_shared()" and
    /// its migrate.c sibling), `folio_maybe_mapped_shared` from 6.15.
    pub fn sharing_question(self) -> SharingQuestion {
        if self >= KernelVersion::new(6, 15) {
            SharingQuestion::MaybeMappedShared
        } else if self >= KernelVersion::new(6, 10) {
            SharingQuestion::LikelyMappedShared
        } else {
            SharingQuestion::PageMapcount
        }
    }

    /// Whether `move_pages` says ENOENT of an anonymous page never faulted
    /// in (`folio_walk_start` finds nothing): 6.12 on ("mm/migrate:
    /// convert do_pages_stat_array() from follow_page() to folio_walk").
    /// Before, `follow_page(FOLL_DUMP)` gave EFAULT for a none entry or a
    /// missing table of an anonymous VMA (`no_page_table`); a swap entry
    /// was ENOENT.
    pub fn move_pages_enoent_for_unfaulted_anon(self) -> bool {
        self >= KernelVersion::new(6, 12)
    }

    /// Whether the NUMA scan tests a COW mapping's folio for sharing by its
    /// reference count (`page_count() != 1`, as 6.1's `change_pte_range`
    /// does, which skips every PTE-mapped large folio): before 6.10 in the
    /// model. 6.18's `prot_numa_skip` asks `folio_maybe_dma_pinned ||
    /// folio_maybe_mapped_shared`; when the refcount test gave way (and
    /// whether a `folio_likely_mapped_shared` step came between) is not
    /// checked against the kernel's history: the model takes 6.10, the
    /// release of David Hildenbrand's page_mapcount() clean-ups.
    pub fn prot_numa_asks_refcount(self) -> bool {
        self < KernelVersion::new(6, 10)
    }

    /// Whether every new THP goes on the deferred split queue, for the
    /// shrinker to split it when more of its pages are zero than
    /// khugepaged's `max_ptes_none` (`thp_underused`, "mm: split
    /// underused THPs", Usama Arif): 6.12 on.
    pub fn splits_underused_thps(self) -> bool {
        self >= KernelVersion::new(6, 12)
    }

    /// Whether `MADV_COLLAPSE` of a file range retracts the page tables of
    /// every mapping of it (Hugh Dickins's `retract_page_tables` without
    /// mmap or VMA lock, 6.6 on in the model: read at 6.1 and 6.18); 6.1
    /// retracts only the caller's for `MADV_COLLAPSE` (khugepaged's, every
    /// one it can lock).
    pub fn retracts_every_mapping(self) -> bool {
        self >= KernelVersion::new(6, 6)
    }

    /// Whether khugepaged runs for shmem alone, its PMD size enabled with
    /// anonymous THPs off (`shmem_hpage_pmd_enabled` in
    /// `hugepage_pmd_enabled`, "mm: shmem: fix khugepaged activation policy
    /// for shmem", Baolin Wang): 6.13 on in the model (unsure: read at 6.1
    /// and 6.18). Before, only the anonymous modes start it.
    pub fn khugepaged_runs_for_shmem(self) -> bool {
        self >= KernelVersion::new(6, 13)
    }

    /// Whether migration splits a large folio on the deferred split queue
    /// before moving anything ("mm/migrate: split source folio if it is on
    /// deferred split list", Zi Yan): 6.10 on. Before, it moved whole.
    pub fn migrate_splits_partially_mapped(self) -> bool {
        self >= KernelVersion::new(6, 10)
    }

    /// Whether a range none of whose PTEs is writable may be collapsed
    /// ("mm: enable khugepaged to operate on non-writable VMAs", Dev Jain):
    /// 6.18 on. Before, `hpage_collapse_scan_pmd` and
    /// `__collapse_huge_page_isolate` gave `SCAN_PAGE_RO` (EINVAL for
    /// `MADV_COLLAPSE`).
    pub fn collapses_read_only_ptes(self) -> bool {
        self >= KernelVersion::new(6, 18)
    }
    /// Whether a THP fault counts `THP_FAULT_ALLOC` when the folio is
    /// allocated (`vma_alloc_anon_folio_pmd`: in 6.13, not in 6.9; taken as
    /// 6.13) rather than once the PMD maps it.
    pub fn counts_thp_fault_alloc_when_allocated(self) -> bool {
        self >= KernelVersion::new(6, 13)
    }
    /// Whether `MADV_COLLAPSE` fails with EBUSY, not EINVAL, for a range
    /// with too many none PTEs (`madvise_collapse_errno` names
    /// `SCAN_EXCEED_NONE_PTE`: in 6.4, not in 6.2; taken as 6.4).
    pub fn collapse_busy_on_none_ptes(self) -> bool {
        self >= KernelVersion::new(6, 4)
    }
    /// Whether reclaim drops a PMD-mapped lazily freed THP whole, without
    /// splitting its PMD (`unmap_huge_pmd_locked`, 6.12).
    pub fn discards_lazyfree_pmd_whole(self) -> bool {
        self >= KernelVersion::new(6, 12)
    }
    /// Whether reclaim unmaps a lazily freed large folio's PTEs in one
    /// batch (`folio_unmap_pte_batch`, "mm: support batched unmap for
    /// lazyfree large folios during reclamation", taken as 6.16).
    pub fn batches_lazyfree_unmap(self) -> bool {
        self >= KernelVersion::new(6, 16)
    }
    /// Whether `MADV_FREE` takes a PTE-mapped large folio the range covers
    /// whole as one (`madvise_folio_pte_batch`) and splits only one it
    /// covers in part ("mm/madvise: optimize lazyfreeing with mTHP in
    /// madvise_free", 6.10); before, it split any large folio mapped once
    /// and stopped at one mapped more than once.
    pub fn lazyfree_batches_large_folios(self) -> bool {
        self >= KernelVersion::new(6, 10)
    }
    /// Whether an mmu_gather frees at most 512 pages, rather than 512
    /// encoded slots, between two reschedule points when freeing costs per
    /// byte (`init_on_free`, page poisoning): `__tlb_batch_free_encoded_pages`
    /// ("mm/mmu_gather: improve cond_resched() handling with large folios
    /// and expensive page freeing", from seed 001's thread; taken as 6.9,
    /// with the batched zap).
    pub fn frees_by_pages_when_costly(self) -> bool {
        self >= KernelVersion::new(6, 9)
    }
    /// Whether mprotect makes an AnonExclusive entry of a private mapping
    /// writable without a write fault although the PTE is clean, and a
    /// THP's PMD at all ("mm/mprotect: allow clean exclusive anon pages to
    /// be writable" and "mm/huge_memory: try avoiding write faults when
    /// changing PMD protection", taken as 6.2). Before, only a dirty PTE
    /// (6.1's `can_change_pte_writable`), never a PMD.
    pub fn mprotect_writes_clean_private(self) -> bool {
        self >= KernelVersion::new(6, 2)
    }
    /// Whether mprotect changes a batch of PTEs mapping one large folio at
    /// once, giving every entry the batch's young and dirty bits ("mm:
    /// optimize mprotect() by PTE batching", taken as 6.17).
    pub fn mprotect_batches_ptes(self) -> bool {
        self >= KernelVersion::new(6, 17)
    }
    /// Whether smaps counts a PROT_NONE huge PMD (a PROT_NONE VMA's, or a
    /// NUMA hinting one): 6.1's `smaps_pmd_entry` asks
    /// `follow_trans_huge_pmd(FOLL_DUMP)`, which refuses a protnone PMD
    /// without FOLL_FORCE (`gup_can_follow_protnone`, 474098edac26), until
    /// "mm/gup: reintroduce FOLL_NUMA as FOLL_HONOR_NUMA_FAULT" (6.5).
    pub fn smaps_counts_protnone_pmd(self) -> bool {
        self >= KernelVersion::new(6, 5)
    }
    /// Whether splitting a dirty huge PMD makes dirty PTEs (`pte_mkdirty`,
    /// soft-dirty on x86 with it: "mm/thp: re-apply mkdirty for small pages
    /// after split", 6.2); before, the PTEs were clean and the folio dirty.
    pub fn pmd_split_dirties_ptes(self) -> bool {
        self >= KernelVersion::new(6, 2)
    }
}

/// The question a policy path of a release asks to learn whether a page
/// (of a large folio) is mapped by more than one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharingQuestion {
    /// `page_mapcount(page) > 1`: that page is mapped more than once.
    PageMapcount,
    /// `folio_likely_mapped_shared(folio)`: the era's guess for the folio.
    LikelyMappedShared,
    /// `folio_maybe_mapped_shared(folio)`: exact for the precise designs.
    MaybeMappedShared,
}

impl Default for KernelVersion {
    /// The newest modelled release.
    fn default() -> KernelVersion {
        KernelVersion::NEWEST
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&format!("{}.{}", self.major, self.minor))
    }
}

impl std::str::FromStr for KernelVersion {
    type Err = String;

    /// As [`KernelVersion::parse`], with an error that says what is accepted.
    fn from_str(s: &str) -> Result<KernelVersion, String> {
        KernelVersion::parse(s).ok_or_else(|| {
            format!(
                "'{s}' is not a kernel release foliomm models (expected MAJOR.MINOR from {} to {}, like 6.8)",
                KernelVersion::OLDEST,
                KernelVersion::NEWEST
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::KernelVersion;

    #[test]
    fn releases_parse_and_order() {
        assert_eq!(KernelVersion::parse("6.1.0-47-amd64"), Some(KernelVersion::new(6, 1)));
        assert_eq!(KernelVersion::parse("6.18"), Some(KernelVersion::NEWEST));
        assert_eq!(KernelVersion::parse("5.15"), None);
        assert_eq!(KernelVersion::parse("6"), None);
        assert!("6.x".parse::<KernelVersion>().unwrap_err().contains("like 6.8"));
        assert!(KernelVersion::new(6, 9) < KernelVersion::new(6, 10));
        assert_eq!(KernelVersion::new(6, 12).to_string(), "6.12");
    }

    /// Each behaviour switches at its release and not before.
    #[test]
    fn behaviours_switch_at_their_release() {
        let v = |minor| KernelVersion::new(6, minor);
        assert!(!v(7).aligns_anon_thp() && v(8).aligns_anon_thp());
        let pmd = 2 << 20;
        assert!(v(11).aligns_anon_mapping(3 << 20, pmd) && !v(12).aligns_anon_mapping(3 << 20, pmd));
        assert!(v(12).aligns_anon_mapping(4 << 20, pmd) && !v(7).aligns_anon_mapping(4 << 20, pmd));
        assert!(!v(12).allocates_thp_on_huge_zero_write() && v(13).allocates_thp_on_huge_zero_write());
        assert!(!v(13).writes_large_shmem_folios() && v(14).writes_large_shmem_folios());
        assert!(!v(14).splits_folios_in_buddies() && v(15).splits_folios_in_buddies());
        assert!(!v(9).pagemap_hugetlb_by_sharing() && v(10).pagemap_hugetlb_by_sharing());
        assert!(!v(17).maps_whole_folio_around() && v(18).maps_whole_folio_around());
        assert!(!v(11).pmd_maps_only_where_thp_allowed() && v(12).pmd_maps_only_where_thp_allowed());
    }
}
