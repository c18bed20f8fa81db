//! Collapsing the PTE-mapped anonymous memory of one PMD range into a
//! PMD-mapped THP (mm/khugepaged.c): the scan that decides whether a range
//! is worth it (`hpage_collapse_scan_pmd`) and its result codes, for
//! `MADV_COLLAPSE` and khugepaged ([`crate::mm::khugepaged`]); the collapse
//! itself is in [`collapse`].
//!
//! Differs from Linux: anonymous and shmem VMAs only (the model has no
//! other page cache); no NUMA node choice or mmu notifiers; the
//! userfaultfd checks (no none PTE in a registered VMA, no uffd-wp PTE) are
//! made by the scan only, not again when the pages are isolated.

mod collapse;
mod collapse_file;

use crate::arch::{pte_index, PMD_ORDER, PMD_SIZE};
use crate::folio::thp::khugepaged::KhugepagedKnob;
use crate::folio::Folio;
pub use crate::kernel::ScanResult;
use crate::kernel::{Consumer, Kernel, Stats};
use crate::mm_types::{vm, Mm, Vma, Vmas};
use crate::pgtable::{load, pte_lock_checked, walk_pmd, PmdSlot};
use crate::phys::{pg, NodeMask, Placement, MAX_NUMNODES};
use crate::rmap;
use crate::sync::Arc;

pub use collapse::collapse_huge_page;
pub use collapse_file::collapse_file;

/// PTEs in a PMD range.
const HPAGE_PMD_NR: u32 = 1 << PMD_ORDER;

/// `struct collapse_control`: who collapses. khugepaged obeys the
/// `max_ptes_*` limits and wants young PTEs; `MADV_COLLAPSE` does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollapseControl {
    /// `is_khugepaged`.
    pub khugepaged: bool,
}

impl CollapseControl {
    /// The `max_ptes_*` limit of `knob` for this collapser: the tunable
    /// for khugepaged, none for `MADV_COLLAPSE`.
    fn limit(self, k: &Kernel, knob: KhugepagedKnob) -> u32 {
        if self.khugepaged {
            k.thp.khugepaged.get(knob)
        } else {
            u32::MAX
        }
    }
}

/// What the scan of a range found that the collapse needs: how many of
/// its PTEs are swapped out (`unmapped`), and where its pages are.
#[derive(Clone, Copy, Debug)]
pub struct Scanned {
    unmapped: u32,
    nodes: NodeLoad,
}

/// `collapse_control.node_load`: how many of a range's pages (folios, for
/// a file) the scan found on each node.
#[derive(Clone, Copy, Debug)]
pub struct NodeLoad([u32; MAX_NUMNODES]);

impl Default for NodeLoad {
    fn default() -> Self {
        NodeLoad([0; MAX_NUMNODES])
    }
}

impl NodeLoad {
    /// Counts one more on the node of `pfn`.
    fn add(&mut self, k: &Kernel, pfn: crate::arch::Pfn) {
        self.0[k.phys.nid(pfn)] += 1;
    }

    /// `hpage_collapse_find_target_node`: the new THP prefers the first
    /// node that holds the most, and may come from any node that holds as
    /// many (`alloc_nmask`).
    pub fn target(&self, k: &Kernel) -> Placement {
        let nodes = &self.0[..k.phys.nr_nodes()];
        let max = nodes.iter().copied().max().unwrap_or(0);
        let preferred = nodes.iter().position(|&n| n == max).unwrap_or(0);
        let allowed = (0..nodes.len()).filter(|&n| nodes[n] == max).fold(0, |m, n| m | 1 << n);
        let allowed = NodeMask(allowed);
        Placement { preferred, allowed }
    }
}

/// `thp_vma_allowable_order(vma, vm_flags, TVA_KHUGEPAGED or
/// TVA_FORCED_COLLAPSE, PMD_ORDER)`: `vm_flags` without `VM_NOHUGEPAGE`,
/// the VMA holding an aligned PMD range, and either anonymous (for
/// khugepaged allowed a PMD THP by the sysfs modes, and with an anon_vma
/// when `khugepaged_enter_vma` asks) or shmem: for `MADV_COLLAPSE` while
/// `shmem_enabled` is not `deny`, for khugepaged if its shmem knobs allow
/// a PMD-sized folio (`shmem_allowable_huge_orders`), judged by the flags
/// the VMA has now, not `vm_flags` (so `MADV_HUGEPAGE` of a shmem VMA under
/// `advise` does not give its MM a khugepaged slot by itself). A hugetlb
/// VMA never (`VM_NO_KHUGEPAGED`).
pub fn thp_vma_allowable(k: &Kernel, vma: &Vma, vm_flags: u32, cc: CollapseControl) -> bool {
    let fits = vma.end() & !(PMD_SIZE - 1) >= vma.start().next_multiple_of(PMD_SIZE) + PMD_SIZE;
    if vm_flags & vm::NOHUGEPAGE != 0 || vma.is_hugetlb() || !fits {
        return false;
    }
    match vma.file() {
        None if cc.khugepaged => k.thp.allowable_orders(vm_flags & vm::HUGEPAGE != 0, false) & (1 << PMD_ORDER) != 0,
        None => true,
        Some(inode) if cc.khugepaged => {
            let now = vma.flags();
            let orders = inode.fault_orders((now & vm::HUGEPAGE != 0, now & vm::NOHUGEPAGE != 0), vma.pgoff());
            orders & (1 << PMD_ORDER) != 0
        }
        Some(_) => k.thp.shmem_enabled() != crate::folio::thp::ShmemHuge::Deny,
    }
}

/// `khugepaged_enter_vma(vma, vm_flags)`: gives `mm` a khugepaged slot
/// (`MMF_VM_HUGEPAGE`) if khugepaged runs and `vma`, with `vm_flags`, may
/// get a PMD THP from it ([`thp_vma_allowable`]; an anonymous VMA only once
/// it has an anon_vma); called where Linux calls it: a new mapping,
/// `MADV_HUGEPAGE` (with the flags it is about to set), a huge PMD fault.
/// A slot lasts until the MM exits; fork passes it on (`khugepaged_fork`).
pub fn khugepaged_enter_vma(k: &Kernel, mm: &Mm, vma: &Vma, vm_flags: u32) {
    use crate::sync::atomic::Ordering::Relaxed;
    let anon_ready = vma.file().is_some() || vma.anon_vma.get() != 0;
    if !mm.khugepaged.load(Relaxed)
        && k.thp.hugepage_pmd_enabled(k.config.release().khugepaged_runs_for_shmem())
        && anon_ready
        && thp_vma_allowable(k, vma, vm_flags, CollapseControl { khugepaged: true })
    {
        mm.khugepaged.store(true, Relaxed);
    }
}

/// `hugepage_vma_revalidate`: the VMA at `addr` after the mmap_lock was
/// taken again, still able to hold a THP at the PMD range of `addr`, and
/// (`expect_anon`) with an anon_vma.
pub(crate) fn revalidate(
    k: &Kernel,
    vmas: &Vmas,
    addr: u64,
    expect_anon: bool,
    cc: CollapseControl,
) -> Result<Arc<Vma>, ScanResult> {
    let vma = vmas.find(addr).ok_or(ScanResult::VmaNull)?;
    let haddr = addr & !(PMD_SIZE - 1);
    if haddr < vma.start() || haddr + PMD_SIZE > vma.end() {
        return Err(ScanResult::AddressRange);
    }
    if !thp_vma_allowable(k, vma, vma.flags(), cc) {
        return Err(ScanResult::VmaCheck);
    }
    if expect_anon && vma.anon_vma.get() == 0 {
        return Err(ScanResult::PageAnon);
    }
    Ok(vma.clone())
}

/// `find_pmd_or_thp_or_none`: the PMD slot of `addr` if it points to a PTE
/// table; else why not.
pub(crate) fn find_pmd(k: &Kernel, mm: &Mm, addr: u64) -> Result<(PmdSlot, u64), ScanResult> {
    let pmd = walk_pmd(&k.phys, mm.pgd, addr).ok_or(ScanResult::PmdNull)?;
    let e = pmd.load(&k.phys);
    match e {
        e if e.is_none() => Err(ScanResult::PmdNone),
        e if e.huge() => Err(ScanResult::PmdMapped),
        e => Ok((pmd, e.pfn())),
    }
}

/// Whether a PTE counts as none for a collapse: none, or the shared zero
/// page (`is_zero_pfn`).
fn none_or_zero(k: &Kernel, pte: crate::arch::Pte) -> bool {
    pte.is_none() || (pte.present() && pte.special() && pte.pfn() == k.zero_pfn)
}

/// `hpage_collapse_scan_pmd` without the collapse: looks at the 512 PTEs
/// of the PMD range at `haddr` of `vma` (the mmap_lock held for read)
/// under their table's lock and says whether collapsing is worth trying.
/// Each PTE of a page (maybe) mapped shared counts against
/// `max_ptes_shared` ([`rmap::page_maybe_mapped_shared`]); a folio not on the LRU, locked, or held by more than its
/// mappings (and the swap cache) stops the scan. Before 6.18 at least one
/// PTE must be writable (`SCAN_PAGE_RO`).
pub fn scan_pmd(k: &Kernel, mm: &Mm, haddr: u64, cc: CollapseControl) -> Result<Scanned, ScanResult> {
    let _walk = mm.pt_read();
    let (pmd, table) = find_pmd(k, mm, haddr)?;
    let _ptl = pte_lock_checked(&k.phys, pmd, table).ok_or(ScanResult::PmdNull)?;
    let (mut none, mut unmapped, mut shared, mut referenced, mut writable) = (0, 0, 0, 0, false);
    // A VMA registered with a userfaultfd allows no none PTE: its faults
    // must reach the handler.
    let armed = mm.published_vma(haddr).is_some_and(|v| v.userfaultfd_armed());
    let mut nodes = NodeLoad::default();
    let mut last_large = None;
    for i in 0..HPAGE_PMD_NR as usize {
        let pte = load(&k.phys, table, pte_index(haddr) + i);
        if pte.is_swap() {
            unmapped += 1;
            if unmapped > cc.limit(k, KhugepagedKnob::MaxPtesSwap) {
                Stats::inc(&k.stats.thp_scan_exceed_swap_pte);
                return Err(ScanResult::ExceedSwapPte);
            }
            continue;
        }
        if none_or_zero(k, pte) {
            none += 1;
            if armed || none > cc.limit(k, KhugepagedKnob::MaxPtesNone) {
                Stats::inc(&k.stats.thp_scan_exceed_none_pte);
                return Err(ScanResult::ExceedNonePte);
            }
            continue;
        }
        if pte.uffd_wp() {
            return Err(ScanResult::PteUffdWp);
        }
        writable |= pte.write();
        if pte.special() {
            return Err(ScanResult::PageNull);
        }
        let f = Folio::containing(&k.phys, pte.pfn());
        if !f.test_anon() {
            return Err(ScanResult::PageAnon);
        }
        nodes.add(k, pte.pfn());
        let is_shared = rmap::page_maybe_mapped_shared(k, f, pte.pfn() - f.pfn);
        if f.is_large() && last_large != Some(f.pfn) {
            if cc.khugepaged && f.is_large() {
                k.decided(Consumer::Collapse, f, is_shared);
            }
            last_large = Some(f.pfn);
        }
        if is_shared {
            shared += 1;
            if shared > cc.limit(k, KhugepagedKnob::MaxPtesShared) {
                Stats::inc(&k.stats.thp_scan_exceed_shared_pte);
                return Err(ScanResult::ExceedSharedPte);
            }
        }
        if !f.head().test(pg::LRU) {
            return Err(ScanResult::PageLru);
        }
        if f.head().test(pg::LOCKED) {
            return Err(ScanResult::PageLock);
        }
        if f.refcount() as u64 != expected_refs(k, f) {
            return Err(ScanResult::PageCount);
        }
        if cc.khugepaged && (pte.0 & crate::arch::Pte::ACCESSED != 0 || f.head().test(pg::REFERENCED)) {
            referenced += 1;
        }
    }
    if !writable && !k.config.release().collapses_read_only_ptes() {
        return Err(ScanResult::PageRo);
    }
    if cc.khugepaged && (referenced == 0 || (unmapped > 0 && referenced < HPAGE_PMD_NR / 2)) {
        return Err(ScanResult::LackReferencedPage);
    }
    Ok(Scanned { unmapped, nodes })
}

/// `folio_expected_ref_count` of a mapped anon folio: a reference per
/// mapping, and one per page while it is in the swap cache.
fn expected_refs(k: &Kernel, f: Folio) -> u64 {
    rmap::folio_mapcount(k, f) + if k.folio_swap(f).is_some() { f.nr_pages() } else { 0 }
}
