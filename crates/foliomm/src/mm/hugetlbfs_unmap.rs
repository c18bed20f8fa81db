//! Unmapping a hugetlbfs file's pages when they leave it
//! (fs/hugetlbfs/inode.c `hugetlb_vmdelete_list` and
//! `hugetlb_unmap_file_folio`), with seed 002's lock order: a VMA's hugetlb
//! lock comes before `i_mmap_rwsem`, but both walks hold `i_mmap_rwsem` for
//! write when they meet the VMA, so they only try its lock. The range's
//! walk skips a VMA whose lock is busy (a fault holds it); the page's walk,
//! run under the page's fault mutex, backs out instead: it lets go of
//! `i_mmap_rwsem`, waits for the VMA's lock, takes `i_mmap_rwsem` again and
//! unmaps the page there if the VMA still has that lock and still maps it.
//!
//! Differs from Linux: only shared VMAs have a hugetlb lock (a private
//! VMA's reservation-map lock, which Linux also tries, is not modelled, so a
//! private VMA is never skipped); "maps the page" is read as "maps the
//! file's page there, not a private copy", which a migration moving the
//! page meanwhile does not change (Linux holds the folio lock instead).

use crate::folio::Folio;
use crate::kernel::{HugetlbSync, Kernel, Stats};
use crate::memory::hugetlb::huge_pte_offset;
use crate::memory::hugetlb_resv::restore_reservations;
use crate::memory::zap::{unmap_page_range, ZapDetails};
use crate::mm_types::{vm, Mm, MmList};
use crate::rmap::VmaRecord;
use crate::shmem::{Busy, Inode};
use crate::sync::{Arc, Mutex, MutexGuard};
use crate::tlb::MmuGather;

impl MmList {
    /// `hugetlb_vmdelete_list` under `i_mmap_rwsem` for write: zaps file
    /// pages `first..last` in every VMA of `inode` whose hugetlb lock (under
    /// the `vma-lock` design) is free, private copies too; a VMA whose lock
    /// is busy is left for [`Self::hugetlb_unmap_file_folio`]. The MMs it
    /// zapped in go to `mms`, to be let go after `i_mmap_rwsem`.
    pub(super) fn hugetlb_vmdelete_list(&self, inode: &Inode, first: u64, last: u64, mms: &mut Vec<Arc<Mm>>) {
        let zap = |m: &VmaRecord| self.zap_mapping(m, first, last, true, mms);
        inode.i_mmap.walk_vma_locked(vma_locks(inode), Busy::Skip, |_| true, zap);
    }

    /// Unmaps the huge page at file page `first`, found mapped under its
    /// fault `mutex` (held: `guard`) as `remove_inode_hugepages` removes
    /// it; returns the mutex held again. From 6.1
    /// ([`Self::hugetlb_unmap_file_folio`]) under the mutex throughout;
    /// from 5.7 to 6.0 (`i-mmap-rwsem`), whose lock order puts
    /// `i_mmap_rwsem` before the fault mutex (as its faults take them), it
    /// lets go of the mutex, takes `i_mmap_rwsem` for write and the mutex
    /// again, and zaps the page in every VMA (`hugetlb_vmdelete_list`).
    pub(super) fn unmap_mapped_huge_page<'a>(
        &self,
        inode: &Inode,
        first: u64,
        mutex: &'a Mutex<()>,
        guard: MutexGuard<'a, ()>,
    ) -> MutexGuard<'a, ()> {
        if inode.k.config.hugetlb_sync != HugetlbSync::IMmapRwsem {
            self.hugetlb_unmap_file_folio(inode, first);
            return guard;
        }
        drop(guard);
        // The MMs zapped in, let go after every lock (declared first).
        let mut zapped = Vec::new();
        let records = inode.i_mmap.write();
        let guard = mutex.lock().unwrap();
        let last = first + inode.page_unit() / crate::arch::PAGE_SIZE;
        for m in records.iter() {
            self.zap_mapping(m, first, last, true, &mut zapped);
        }
        guard
    }

    /// `hugetlb_unmap_file_folio`, under the fault mutex of the huge page
    /// at file page `first` (so no fault maps it meanwhile): unmaps it from
    /// every VMA that maps it, in the walk's order, backing out of
    /// `i_mmap_rwsem` to wait for a VMA's busy hugetlb lock, then walking
    /// again from the start.
    pub(super) fn hugetlb_unmap_file_folio(&self, inode: &Inode, first: u64) {
        let last = first + inode.page_unit() / crate::arch::PAGE_SIZE;
        // The MMs looked at, let go after every lock (declared first).
        let (mut looked, mut zapped) = (Vec::new(), Vec::new());
        let maps = |m: &VmaRecord| self.maps_file_page(inode, m, first, &mut looked);
        let zap = |m: &VmaRecord| self.zap_mapping(m, first, last, true, &mut zapped);
        let backed_out = inode.i_mmap.walk_vma_locked(vma_locks(inode), Busy::BackOut, maps, zap);
        Stats::add(&inode.k.stats.hugetlb_unmap_backed_out, backed_out);
    }

    /// `hugetlb_vma_maps_pfn`: whether the VMA of `m` maps the file's huge
    /// page at file page `first` (not a private copy of it). The MM looked
    /// at goes to `mms`.
    fn maps_file_page(&self, inode: &Inode, m: &VmaRecord, first: u64, mms: &mut Vec<Arc<Mm>>) -> bool {
        let (Some((addr, _)), Some(mm), Some(size)) =
            (m.addresses(first, first + 1), self.get(m.mm), inode.huge_size())
        else {
            return false;
        };
        let k: &Kernel = &mm.kernel;
        let e = huge_pte_offset(k, &mm, addr, size).map(|slot| slot.load(&k.phys));
        let maps = e.is_some_and(|e| !e.is_none() && e.huge() && !Folio::containing(&k.phys, e.pfn()).test_anon());
        mms.push(mm);
        maps
    }

    /// Zaps in the VMA of `m` the pages that map file pages `first..last`
    /// (`zap_page_range_single`; `unmap_hugepage_range` on hugetlbfs, which
    /// never spares a private copy and gives the owner of a private
    /// mapping back the reservations of its copies), private copies too
    /// if `even_cows`; the MM goes to `mms`.
    pub(super) fn zap_mapping(&self, m: &VmaRecord, first: u64, last: u64, even_cows: bool, mms: &mut Vec<Arc<Mm>>) {
        let Some((start, end)) = m.addresses(first, last) else { return };
        // An MM being dropped unmaps everything itself.
        let Some(mm) = self.get(m.mm) else { return };
        let k = &*mm.kernel;
        if let Some(v) = mm.published_vma(start).filter(|v| v.id() == m.vma) {
            restore_reservations(k, &mm, &v, start, end);
        }
        let mut tlb = MmuGather::new(k, &mm.tlb, false);
        unmap_page_range(
            k,
            &mm,
            &mut tlb,
            start,
            end,
            ZapDetails { skip_cows: !even_cows, reclaim_pt: false, mlocked: m.flags & vm::LOCKED != 0 },
        );
        drop(tlb);
        mms.push(mm);
    }
}

/// Whether the walks take the VMAs' hugetlb locks (the `vma-lock` design).
fn vma_locks(inode: &Inode) -> bool {
    inode.k.config.hugetlb_sync == HugetlbSync::VmaLock
}
