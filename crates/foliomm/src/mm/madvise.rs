//! mm/madvise.c `madvise`: MADV_DONTNEED zaps and MADV_POPULATE_* fault
//! in under the mmap_lock for read; the others change VMA flags under it
//! for write.
#![warn(missing_docs)]

use super::range_end;
use super::vma::{hugetlb_may_split, merge_around, set_vma_flags};
use crate::arch::{PAGE_SIZE, PMD_SIZE};
use crate::memory::handle_mm_fault;
use crate::memory::zap::{unmap_vma_range, ZapDetails};
use crate::mm_types::{vm, Mm, Vma};
use crate::tlb::MmuGather;
use crate::{Errno, Result};

/// `madvise` advice foliomm models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Advice {
    /// `MADV_DONTNEED`: zap the range (hugetlb: whole huge pages only); later
    /// reads see zeros, or the file's data for a file mapping.
    DontNeed,
    /// `MADV_REMOVE`: punch a hole in the shared file mapped there.
    Remove,
    /// `MADV_HUGEPAGE`: set `VM_HUGEPAGE`, so THP `madvise` modes apply to
    /// later faults (no khugepaged collapse in the model).
    HugePage,
    /// `MADV_NOHUGEPAGE`: set `VM_NOHUGEPAGE`; later faults use no THP.
    NoHugePage,
    /// `MADV_DONTFORK`: set `VM_DONTCOPY`; a child of fork gets no copy.
    DontFork,
    /// `MADV_DOFORK`: clear `VM_DONTCOPY`.
    DoFork,
    /// `MADV_POPULATE_READ`: fault every page in for read.
    PopulateRead,
    /// `MADV_POPULATE_WRITE`: fault every page in for write (breaking COW).
    PopulateWrite,
    /// `MADV_PAGEOUT`: reclaim the range's anonymous pages to swap now
    /// (those mapped once; see [`crate::memory::vmscan`]).
    PageOut,
    /// `MADV_COLD`: deactivate the range's pages (unreferenced; the
    /// active ones move to the inactive list through the CPU's batch;
    /// large folios it covers in part split).
    Cold,
    /// `MADV_COLLAPSE`: collapse every aligned 2 MiB range into a
    /// PMD-mapped THP now (see [`crate::mm::khugepaged`]).
    Collapse,
    /// `MADV_MERGEABLE`: set `VM_MERGEABLE` where KSM may merge (private
    /// mappings, not hugetlb; others are passed over) and give the MM a
    /// KSM slot (see [`crate::mm::ksm`]).
    Mergeable,
    /// `MADV_UNMERGEABLE`: break every KSM page of the range's mergeable
    /// VMAs, then clear `VM_MERGEABLE`.
    Unmergeable,
    /// `MADV_FREE`: the range's anonymous pages may be dropped instead of
    /// swapped until written again (see [`crate::memory::madvise_free`]);
    /// private anonymous mappings only.
    Free,
}

impl Advice {
    /// Every advice, with the lowercase `MADV_*` suffix that names it.
    pub const ALL: [(Advice, &'static str); 14] = [
        (Advice::DontNeed, "dontneed"),
        (Advice::Remove, "remove"),
        (Advice::HugePage, "hugepage"),
        (Advice::NoHugePage, "nohugepage"),
        (Advice::DontFork, "dontfork"),
        (Advice::DoFork, "dofork"),
        (Advice::PopulateRead, "populate_read"),
        (Advice::PopulateWrite, "populate_write"),
        (Advice::PageOut, "pageout"),
        (Advice::Cold, "cold"),
        (Advice::Collapse, "collapse"),
        (Advice::Mergeable, "mergeable"),
        (Advice::Unmergeable, "unmergeable"),
        (Advice::Free, "free"),
    ];

    /// The advice named by the lowercase `MADV_*` suffix (`dontneed`,
    /// `hugepage`, ...), or `None`.
    pub fn parse(s: &str) -> Option<Advice> {
        Self::ALL.iter().find(|(_, n)| *n == s).map(|&(a, _)| a)
    }

    /// The lowercase `MADV_*` suffix.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(a, _)| *a == self).map(|&(_, n)| n).expect("every advice is named")
    }
}

impl Mm {
    /// `madvise(addr, len, advice)`. As in Linux, a range with holes is
    /// handled where mapped and then fails with ENOMEM.
    pub fn madvise(&self, addr: u64, len: u64, advice: Advice) -> Result<()> {
        crate::sync::sim::work(crate::sync::sim::Work::Syscall);
        let end = range_end(addr, len)?;
        if advice == Advice::Remove {
            return self.madvise_remove(addr, end - addr);
        }
        if matches!(advice, Advice::PopulateRead | Advice::PopulateWrite) {
            return self.madvise_populate(addr, end, advice == Advice::PopulateWrite);
        }
        if advice == Advice::Collapse {
            return self.madvise_collapse_vmas(addr, end);
        }
        if matches!(advice, Advice::PageOut | Advice::Cold) {
            return self.madvise_pageout(addr, end, advice == Advice::PageOut);
        }
        if advice == Advice::Free {
            return self.madvise_free(addr, end);
        }
        if advice == Advice::DontNeed {
            // MADV_DONTNEED needs only the mmap_lock for read.
            let vmas = self.mmap_read_lock();
            // madvise_dontneed_free_valid_vma(): in a hugetlb VMA the range
            // starts on a huge page (else EINVAL, checked before anything
            // changes) and its end is rounded down to one.
            let huge = |v: &Vma| v.huge_page_size();
            if vmas.overlapping(addr, end).any(|v| huge(v).is_some_and(|h| !v.start().max(addr).is_multiple_of(h))) {
                return Err(Errno::EINVAL);
            }
            let k = &*self.kernel;
            k.zap_drain();
            let mut tlb = MmuGather::new(k, &self.tlb, false);
            let dontneed =
                ZapDetails { reclaim_pt: k.config.release().reclaims_empty_pte_tables(), ..ZapDetails::default() };
            for v in vmas.overlapping(addr, end) {
                // madvise_dontneed_free_valid_vma(): not an mlocked VMA
                // (the ones before it are zapped already).
                if v.flags() & vm::LOCKED != 0 && !v.is_hugetlb() {
                    return Err(Errno::EINVAL);
                }
                let stop = v.end().min(end);
                let stop = huge(v).map_or(stop, |h| stop / h * h);
                let start = v.start().max(addr);
                if start < stop {
                    unmap_vma_range(k, self, &mut tlb, v, (start, stop), dontneed);
                }
            }
            return if vmas.covers(addr, end) { Ok(()) } else { Err(Errno::ENOMEM) };
        }
        let (set, clear) = match advice {
            Advice::HugePage => (vm::HUGEPAGE, vm::NOHUGEPAGE),
            Advice::NoHugePage => (vm::NOHUGEPAGE, vm::HUGEPAGE),
            Advice::DontFork => (vm::DONTCOPY, 0),
            Advice::DoFork => (0, vm::DONTCOPY),
            Advice::Mergeable => (vm::MERGEABLE, 0),
            Advice::Unmergeable => (0, vm::MERGEABLE),
            Advice::DontNeed
            | Advice::Remove
            | Advice::PopulateRead
            | Advice::PopulateWrite
            | Advice::PageOut
            | Advice::Cold
            | Advice::Collapse
            | Advice::Free => {
                unreachable!()
            }
        };
        let mut vmas = self.mmap_write_lock();
        if !hugetlb_may_split(&vmas, addr) || !hugetlb_may_split(&vmas, end) {
            return Err(Errno::EINVAL);
        }
        let covered = vmas.covers(addr, end);
        let new_flags = |flags: u32| match advice {
            // ksm_madvise(): only where vma_ksm_compatible().
            Advice::Mergeable => super::ksm::mergeable_flags(flags),
            _ => (flags | set) & !clear,
        };
        if advice == Advice::Mergeable && vmas.overlapping(addr, end).any(|v| new_flags(v.flags()) != v.flags()) {
            // __ksm_enter(): the MM gets its slot with its first mergeable VMA.
            self.ksm.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if advice == Advice::Unmergeable {
            self.unmerge_ksm_pages(&vmas, addr, end)?;
        }
        if advice == Advice::HugePage {
            // hugepage_madvise() → khugepaged_enter_vma(), before the VMA
            // is split or its flags are changed.
            for v in vmas.overlapping(addr, end) {
                crate::memory::khugepaged::khugepaged_enter_vma(&self.kernel, self, v, new_flags(v.flags()));
            }
        }
        self.split_for_change(&mut vmas, addr, end, new_flags)?;
        let changed = set_vma_flags(&mut vmas, addr, end, new_flags);
        merge_around(&mut vmas, addr, end, self.kernel.config.release(), &changed);
        if covered {
            Ok(())
        } else {
            Err(Errno::ENOMEM)
        }
    }

    /// `madvise_pageout` (or `madvise_cold`) under the mmap_lock for read,
    /// VMA by VMA: EINVAL at an mlocked or hugetlb VMA (`can_madv_lru_vma`;
    /// the VMAs before it are done already), ENOMEM after a range with holes.
    fn madvise_pageout(&self, addr: u64, end: u64, pageout: bool) -> Result<()> {
        let vmas = self.mmap_read_lock();
        for v in vmas.overlapping(addr, end) {
            if v.flags() & vm::LOCKED != 0 || v.is_hugetlb() {
                return Err(Errno::EINVAL);
            }
            crate::memory::madvise_cold::pageout_range(
                &self.kernel,
                self,
                v.start().max(addr),
                v.end().min(end),
                pageout,
            );
        }
        if vmas.covers(addr, end) {
            Ok(())
        } else {
            Err(Errno::ENOMEM)
        }
    }

    /// `MADV_FREE` VMA by VMA (`madvise_free_single_vma`, under the
    /// mmap_lock for read): EINVAL at the first VMA that is not private
    /// anonymous memory (`vma_is_anonymous`) or is mlocked or hugetlb
    /// (`madvise_dontneed_free_valid_vma`), the VMAs before it done; ENOMEM
    /// after a range with holes.
    fn madvise_free(&self, addr: u64, end: u64) -> Result<()> {
        let vmas = self.mmap_read_lock();
        for v in vmas.overlapping(addr, end) {
            if v.file().is_some() || v.shared() || v.flags() & vm::LOCKED != 0 || v.is_hugetlb() {
                return Err(Errno::EINVAL);
            }
            crate::memory::madvise_free::madvise_free_range(&self.kernel, self, v.start().max(addr), v.end().min(end));
        }
        if vmas.covers(addr, end) {
            Ok(())
        } else {
            Err(Errno::ENOMEM)
        }
    }

    /// `MADV_COLLAPSE` VMA by VMA (`madvise_walk_vmas`, which finds the
    /// next VMA again after the lock was dropped): the first error stops
    /// it; ENOMEM after a range with holes.
    fn madvise_collapse_vmas(&self, addr: u64, end: u64) -> Result<()> {
        let (pieces, covered) = {
            let vmas = self.mmap_read_lock();
            let pieces: Vec<(u64, u64)> =
                vmas.overlapping(addr, end).map(|v| (v.start().max(addr), v.end().min(end))).collect();
            (pieces, vmas.covers(addr, end))
        };
        for (start, stop) in pieces {
            self.madvise_collapse(start, stop)?;
        }
        if covered {
            Ok(())
        } else {
            Err(Errno::ENOMEM)
        }
    }

    /// `madvise_populate` (`MADV_POPULATE_READ` / `_WRITE`): faults in
    /// every page of `[addr, end)` for read or for write (which breaks COW,
    /// as GUP with `FOLL_WRITE` does), touching no byte. Fails with ENOMEM
    /// at the first hole, the pages before populated (before 6.9: after
    /// populating every mapped part, see
    /// [`crate::release::KernelVersion::madvise_populate_stops_at_a_hole`]), EINVAL on a VMA
    /// that does not allow the access (`check_vma_flags` under
    /// `FOLL_MADV_POPULATE`), EFAULT where a fault ends in SIGBUS.
    fn madvise_populate(&self, addr: u64, end: u64, write: bool) -> Result<()> {
        let vmas = self.mmap_read_lock();
        let stops = self.kernel.config.release().madvise_populate_stops_at_a_hole();
        let (mut a, mut hole) = (addr, false);
        while a < end {
            let Some(vma) = vmas.find(a) else {
                match vmas.next_starting(a, end).map(|v| v.start()) {
                    Some(next) if !stops => (a, hole) = (next, true),
                    _ => return Err(Errno::ENOMEM),
                }
                continue;
            };
            if if write { !vma.writable() } else { !vma.readable() } {
                return Err(Errno::EINVAL);
            }
            if self.translates(a, write).is_none() {
                handle_mm_fault(self, vma, a, write).map_err(|e| match e {
                    Errno::SIGBUS | Errno::EACCES => Errno::EFAULT,
                    e => e,
                })?;
            } else if write {
                // follow_page_pte() with FOLL_WRITE | FOLL_TOUCH dirties
                // the folio a writable entry already maps.
                self.touch_dirty(a);
            }
            a = match self.translates(a, false) {
                Some(true) => (a | (vma.huge_page_size().unwrap_or(PMD_SIZE) - 1)) + 1,
                _ => a + PAGE_SIZE,
            };
        }
        if hole {
            return Err(Errno::ENOMEM);
        }
        Ok(())
    }
}
