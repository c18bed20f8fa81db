//! The two callers of a collapse (mm/khugepaged.c): `MADV_COLLAPSE`
//! (`madvise_collapse`), synchronous and blind to the `max_ptes_*` limits,
//! and khugepaged's scan over every MM (`khugepaged_do_scan`), run here a
//! given number of full passes at once instead of by a kernel thread.

use crate::arch::PMD_SIZE;
use crate::kernel::{Kernel, Stats};
use crate::memory::khugepaged::{
    collapse_file, collapse_huge_page, revalidate, scan_pmd, thp_vma_allowable, CollapseControl, ScanResult,
};
use crate::mm_types::{Mm, MmList};
use crate::sync::atomic::Ordering::Relaxed;
use crate::{Errno, Result};

const MADVISE: CollapseControl = CollapseControl { khugepaged: false };
const KHUGEPAGED: CollapseControl = CollapseControl { khugepaged: true };

/// Scans the PMD range at `haddr` of `mm` and collapses it if the scan
/// finds it worth it (`hpage_collapse_scan_pmd` after
/// `hugepage_vma_revalidate`); each result counted.
fn collapse_range(k: &Kernel, mm: &Mm, haddr: u64, cc: CollapseControl) -> ScanResult {
    let file = {
        let vmas = mm.mmap_read_lock();
        let vma = revalidate(k, &vmas, haddr, false, cc).map(|_| vmas.find(haddr).cloned());
        vma.map(|v| v.and_then(|v| v.file().map(|f| (f, v.page_index(haddr)))))
    };
    // A shmem VMA: the page cache is scanned without the mmap_lock.
    match file {
        Ok(Some((_, start))) if !start.is_multiple_of(1 << crate::arch::PMD_ORDER) => {
            return ScanResult::AddressRange.count(k)
        }
        Ok(Some((inode, start))) => return collapse_file(k, mm, &inode, start, haddr, cc).count(k),
        Err(r) => return r.count(k),
        Ok(None) => {}
    }
    let scanned = {
        let vmas = mm.mmap_read_lock();
        revalidate(k, &vmas, haddr, false, cc).and_then(|_| scan_pmd(k, mm, haddr, cc))
    };
    match scanned {
        Ok(s) => collapse_huge_page(k, mm, haddr, s, cc),
        Err(r) => r,
    }
    .count(k)
}

/// `madvise_collapse_errno`: the errno `MADV_COLLAPSE` returns for the
/// last failure: ENOMEM for a failed allocation, EBUSY (from 6.4) for none
/// PTEs in a VMA registered with a userfaultfd (the only way a collapse
/// meets too many), EAGAIN for what may pass (a busy or pinned folio),
/// EINVAL for the rest.
fn madvise_collapse_errno(r: ScanResult, release: crate::release::KernelVersion) -> Errno {
    match r {
        ScanResult::AllocHugePageFail => Errno::ENOMEM,
        ScanResult::ExceedNonePte if release.collapse_busy_on_none_ptes() => Errno::EBUSY,
        ScanResult::PageCount | ScanResult::PageLock | ScanResult::PageLru | ScanResult::DelPageLru => Errno::EAGAIN,
        _ => Errno::EINVAL,
    }
}

/// Whether `madvise_collapse` goes on to the next PMD range after `r`
/// (its list of results where continuing is fine).
fn may_continue(r: ScanResult) -> bool {
    use ScanResult::*;
    matches!(
        r,
        PmdNull | PteNonPresent | PageRo | LackReferencedPage | PageNull | PageCount | PageLock | PageLru | DelPageLru
    )
}

impl Mm {
    /// `madvise_collapse` over `[start, end)` inside one VMA: every
    /// aligned PMD range it covers collapsed into a PMD-mapped THP (one
    /// already is counts as done), whatever the THP sysfs modes and
    /// `max_ptes_*` limits say. EINVAL if the VMA may not have a THP
    /// (`VM_NOHUGEPAGE`, too small, not anonymous); otherwise success if
    /// every range is a THP afterwards, else the errno of the last failure
    /// ([`madvise_collapse_errno`]); a failure not on the list of
    /// passable ones stops at that range. A range that covers no aligned
    /// 2 MiB range succeeds if it touches a 2 MiB boundary and fails with
    /// EINVAL if it lies inside one (Linux's unsigned count wraps).
    pub(crate) fn madvise_collapse(&self, start: u64, end: u64) -> Result<()> {
        let k = &*self.kernel;
        {
            let vmas = self.mmap_read_lock();
            let vma = vmas.find(start).ok_or(Errno::ENOMEM)?;
            if !thp_vma_allowable(k, vma, vma.flags(), MADVISE) {
                return Err(Errno::EINVAL);
            }
        }
        // lru_add_drain_all(): no LRU batch holds a reference the
        // collapse would take for someone else's.
        k.lru_add_drain_all();
        let (hstart, hend) = (start.next_multiple_of(PMD_SIZE), end & !(PMD_SIZE - 1));
        let (mut thps, mut last_fail) = (0, ScanResult::Fail);
        for haddr in (hstart..hend).step_by(PMD_SIZE as usize) {
            match collapse_range(k, self, haddr, MADVISE) {
                ScanResult::Succeed | ScanResult::PmdMapped => thps += 1,
                r if may_continue(r) => last_fail = r,
                r => {
                    last_fail = r;
                    break;
                }
            }
        }
        // `thps == (hend - hstart) >> HPAGE_PMD_SHIFT` in unsigned arithmetic:
        // a range inside one PMD range that reaches no boundary (hend below
        // hstart) wraps, and fails with the errno of SCAN_FAIL (EINVAL).
        if hend >= hstart && thps == (hend - hstart) / PMD_SIZE {
            Ok(())
        } else {
            Err(madvise_collapse_errno(last_fail, self.kernel.config.release()))
        }
    }
}

/// `passes` full scans of khugepaged (`khugepaged_do_scan` until
/// `khugepaged/full_scans` has grown by `passes`): every live MM with a
/// khugepaged slot in turn (in the order they were made, where Linux keeps
/// the order the slots were), each VMA it may collapse in
/// (`TVA_KHUGEPAGED`: the sysfs modes apply), each aligned PMD range of it
/// scanned and collapsed under the `max_ptes_*` limits. `pages_to_scan`
/// paces the kernel thread only and does not change what a full pass does.
/// No pass at all while no PMD size is enabled (`hugepage_pmd_enabled`:
/// the thread is stopped). Returns the ranges counted in
/// `khugepaged/pages_collapsed`: those collapsed, and, as Linux counts
/// them, every shmem range that is one PMD-sized folio already.
pub fn khugepaged_scan(k: &Kernel, mmlist: &MmList, passes: u32) -> u64 {
    let mut collapsed = 0;
    if !k.thp.hugepage_pmd_enabled(k.config.release().khugepaged_runs_for_shmem()) {
        return 0;
    }
    // khugepaged_do_scan(): lru_add_drain_all() first.
    k.lru_add_drain_all();
    for _ in 0..passes {
        for mm in mmlist.alive().into_iter().filter(|mm| mm.khugepaged.load(Relaxed)) {
            let ranges: Vec<u64> = mm
                .vmas()
                .iter()
                .filter(|v| thp_vma_allowable(k, v, v.flags(), KHUGEPAGED))
                .flat_map(|v| {
                    (v.start().next_multiple_of(PMD_SIZE)..v.end() & !(PMD_SIZE - 1)).step_by(PMD_SIZE as usize)
                })
                .collect();
            for haddr in ranges {
                if mm.has_exited() {
                    break;
                }
                if collapse_range(k, &mm, haddr, KHUGEPAGED) == ScanResult::Succeed {
                    Stats::inc(&k.stats.khugepaged_pages_collapsed);
                    collapsed += 1;
                }
            }
        }
        Stats::inc(&k.stats.khugepaged_full_scans);
    }
    collapsed
}
