//! VMA surgery of mm/vma.c: `munmap` (`do_vmi_munmap`), `split_vma` and
//! `vma_merge`, all under the mmap_lock held for write (a `munmap` call
//! zaps under it downgraded to read), each VMA it changes write-locked
//! first (`vma_start_write`), each it removes detached before it is freed.

use super::range_end;
use crate::arch::{PAGE_SIZE, PMD_SIZE};
use crate::memory::huge_memory::split_huge_pmd;
use crate::memory::hugetlb_resv;
use crate::memory::zap::{free_pgtables, unmap_vma_range, ZapDetails};
use crate::mm_types::{vm, Mm, Vma, Vmas};
use crate::release::KernelVersion;
use crate::sync::Arc;
use crate::tlb::MmuGather;
use crate::{Errno, Result};

impl Mm {
    /// `munmap(addr, len)` (`__vm_munmap`): the VMAs go under the
    /// mmap_lock held for write, which is then downgraded
    /// (`do_vmi_align_munmap` with `unlock`, since 4.20) for the zap and
    /// the page tables' freeing, so faults on other VMAs (and every other
    /// reader of the mmap_lock) run beside it; another munmap waits, as it
    /// needs the lock for write.
    pub fn munmap(&self, addr: u64, len: u64) -> Result<()> {
        crate::sync::sim::work(crate::sync::sim::Work::Syscall);
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let end = range_end(addr, len).map_err(|_| Errno::EINVAL)?;
        let mut vmas = self.mmap_write_lock();
        if !hugetlb_may_split(&vmas, addr) || !hugetlb_may_split(&vmas, end) {
            return Err(Errno::EINVAL);
        }
        let removed = self.detach_range(&mut vmas, addr, end)?;
        self.clear_range(&vmas.downgrade(), removed, addr, end);
        Ok(())
    }

    /// `do_vmi_munmap`: splits the VMAs at the range's edges, removes those
    /// inside, zaps their pages and frees page tables no VMA needs any more.
    /// ENOMEM, with nothing changed, if it would split one VMA in three at
    /// `vm.max_map_count` VMAs (`vms_gather_munmap_vmas`; otherwise the
    /// count may pass the limit for a moment).
    pub(super) fn do_munmap(&self, vmas: &mut Vmas, start: u64, end: u64) -> Result<()> {
        let removed = self.detach_range(vmas, start, end)?;
        self.clear_range(vmas, removed, start, end);
        Ok(())
    }

    /// `vms_gather_munmap_vmas`: the VMAs of `[start, end)`, split at its
    /// edges, taken out of the tree (detached), or ENOMEM as
    /// [`Mm::do_munmap`] says.
    fn detach_range(&self, vmas: &mut Vmas, start: u64, end: u64) -> Result<Vec<Arc<Vma>>> {
        if start >= end || !vmas.any_in(start, end) {
            return Ok(Vec::new());
        }
        let in_three = vmas.find(start).is_some_and(|v| v.start() < start && end < v.end());
        if in_three && vmas.len() >= self.kernel.config.max_map_count {
            return Err(Errno::ENOMEM);
        }
        self.split_vma_unchecked(vmas, start);
        self.split_vma_unchecked(vmas, end);
        let starts: Vec<u64> = vmas.overlapping(start, end).map(|v| v.start()).collect();
        Ok(starts.iter().filter_map(|&s| vmas.remove(s)).collect())
    }

    /// `vms_complete_munmap_vmas`: zaps the `removed` VMAs' pages, frees
    /// the page tables of `[start, end)` no VMA of `vmas` needs, and frees
    /// the VMAs (`remove_vma`).
    fn clear_range(&self, vmas: &Vmas, removed: Vec<Arc<Vma>>, start: u64, end: u64) {
        if removed.is_empty() {
            return;
        }
        let k = &*self.kernel;
        k.zap_drain();
        let mut tlb = MmuGather::new(k, &self.tlb, false);
        for v in &removed {
            unmap_vma_range(k, self, &mut tlb, v, (v.start(), v.end()), ZapDetails::default());
        }
        free_pgtables(k, self, vmas, &mut tlb, start, end);
        drop(tlb);
        for v in removed {
            hugetlb_resv::vm_op_close(k, &v);
            vmas.free(v);
        }
    }

    /// `split_vma` at `addr` if a VMA straddles it; ENOMEM, with nothing
    /// changed, if the MM already holds `vm.max_map_count` VMAs.
    pub(super) fn split_vma(&self, vmas: &mut Vmas, addr: u64) -> Result<()> {
        let straddles = vmas.find(addr).is_some_and(|v| v.start() < addr);
        if straddles && vmas.len() >= self.kernel.config.max_map_count {
            return Err(Errno::ENOMEM);
        }
        self.split_vma_unchecked(vmas, addr);
        Ok(())
    }

    /// Splits the VMAs straddling `start` and `end` that `change` (new
    /// flags from old) would change, as `vma_modify` does for mprotect and
    /// madvise: a VMA whose flags stay is left whole. ENOMEM at
    /// `vm.max_map_count`, with the first split kept, as in Linux. Differs
    /// from Linux: `vma_modify` first tries to merge the range into a
    /// neighbour, which needs no free slot; the model splits first and
    /// merges after, so at the limit such a change fails here. And where a
    /// range spans several VMAs Linux has changed the earlier ones when a
    /// later split fails; here none is.
    pub(super) fn split_for_change(
        &self,
        vmas: &mut Vmas,
        start: u64,
        end: u64,
        change: impl Fn(u32) -> u32,
    ) -> Result<()> {
        for addr in [start, end] {
            if vmas.find(addr).is_some_and(|v| change(v.flags()) != v.flags()) {
                self.split_vma(vmas, addr)?;
            }
        }
        Ok(())
    }

    /// `__split_vma` at `addr` if a VMA straddles it, whatever the count: the
    /// VMA keeps the part below, a new one (`vm_area_dup`) takes the part
    /// above. First splits a huge PMD that straddles the new boundary
    /// (`vma_adjust_trans_huge`).
    pub(super) fn split_vma_unchecked(&self, vmas: &mut Vmas, addr: u64) {
        let Some(v) = vmas.find(addr).filter(|v| v.start() < addr).cloned() else {
            return;
        };
        vmas.start_write(&v);
        if !addr.is_multiple_of(PMD_SIZE) {
            split_huge_pmd(&self.kernel, self, addr);
        }
        let tail = vmas.dup(&v);
        tail.set_range(addr, v.end(), v.pgoff() + (addr - v.start()) / PAGE_SIZE);
        // The tail is linked to the file before the head shrinks, so an
        // `i_mmap` walker always finds every mapped page (Linux holds
        // `i_mmap_rwsem` across both; this order needs no lock across).
        vmas.insert(tail);
        v.set_range(v.start(), addr, v.pgoff());
    }
}

/// `vma_merge`: merges neighbouring compatible VMAs whose shared boundary lies
/// in `[start, end]` (the range an operation worked on; `changed` holds
/// the starts of the VMAs whose flags it changed, or that it made); the
/// lower one grows and adopts the upper one's anon_vma if it had none.
/// Before 6.16 a VMA with an anon_vma and one without merge only when the
/// one without is the VMA being changed (of two changed ones, the upper,
/// which Linux changes second) and the one with it its neighbour
/// ([`KernelVersion::merges_into_vma_without_anon_vma`]). A fork child's
/// VMA with an anon_vma never takes in one without
/// ([`crate::mm_types::vm::ANON_PARENTS`]).
pub(super) fn merge_around(vmas: &mut Vmas, start: u64, end: u64, release: KernelVersion, changed: &[u64]) {
    let mut cur = vmas.prev(start).map_or(start, |v| v.start());
    loop {
        let Some(a) = vmas.get(cur).cloned() else {
            match vmas.next_starting(cur, end) {
                Some(v) => {
                    cur = v.start();
                    continue;
                }
                None => return,
            }
        };
        let next_start = a.end();
        if next_start > end {
            return;
        }
        match vmas.get(next_start).cloned() {
            Some(b) if a.can_merge_with(&b) && anon_vmas_merge(&a, &b, changed, release) => {
                vmas.start_write(&a);
                // VM_SOFTDIRTY never stops a merge; the merged VMA has the
                // changed one's (of two, the upper's, changed last).
                let from = if changed.contains(&b.start()) { &b } else { &a };
                let flags = a.flags() & !vm::SOFTDIRTY | from.flags() & vm::SOFTDIRTY;
                if flags != a.flags() {
                    a.set_flags(flags);
                }
                // `a` covers `b`'s pages in `i_mmap` before `b` leaves it.
                a.set_range(a.start(), b.end(), a.pgoff());
                let b = vmas.remove(next_start).expect("the VMA just found");
                if a.anon_vma() == 0 {
                    a.anon_vma.clone_from(&b.anon_vma);
                }
                vmas.free(b);
            }
            Some(_) => cur = next_start,
            None => match vmas.next_starting(cur, end) {
                Some(v) => cur = v.start(),
                None => return,
            },
        }
    }
}

/// `is_mergeable_anon_vma` for the lower VMA `a` and the upper `b`, given
/// the starts of the VMAs the operation `changed` (see [`merge_around`]).
fn anon_vmas_merge(a: &Vma, b: &Vma, changed: &[u64], release: KernelVersion) -> bool {
    let (with_a, with_b) = (a.anon_vma() != 0, b.anon_vma() != 0);
    if with_a == with_b || release.merges_into_vma_without_anon_vma() {
        return true;
    }
    // Before 6.16 only a neighbour with an anon_vma (a singular chain)
    // takes in the VMA being changed without one: Linux changes VMAs in
    // address order, so of two changed ones the upper is the region.
    let region_is_b = changed.contains(&b.start());
    let region_is_a = !region_is_b && changed.contains(&a.start());
    (region_is_b && with_a) || (region_is_a && with_b)
}

/// Gives every VMA in `[start, end)` the flags `new_flags` makes of its
/// own (`vm_flags_reset` under the VMA's write lock); the starts of those
/// that changed.
pub(super) fn set_vma_flags(vmas: &mut Vmas, start: u64, end: u64, new_flags: impl Fn(u32) -> u32) -> Vec<u64> {
    let mut changed = Vec::new();
    for v in vmas.overlapping(start, end) {
        let flags = new_flags(v.flags());
        if flags != v.flags() {
            vmas.start_write(v);
            v.set_flags(flags);
            changed.push(v.start());
        }
    }
    changed
}

/// How far from `start` (towards `end`) the VMAs follow each other without
/// a hole: `end` if they cover `[start, end)`, `start` if no VMA holds it
/// (the walk of `do_mprotect_pkey` and `apply_vma_lock_flags`).
pub(super) fn covered_from(vmas: &Vmas, start: u64, end: u64) -> u64 {
    let mut reach = start;
    for v in vmas.overlapping(start, end) {
        if v.start() > reach {
            break;
        }
        reach = v.end().min(end);
    }
    reach
}

/// `hugetlb_vm_op_split`: a hugetlb VMA can be split only at a boundary of
/// its huge pages; true if splitting at `addr` is allowed (or splits nothing).
pub(super) fn hugetlb_may_split(vmas: &Vmas, addr: u64) -> bool {
    vmas.find(addr).and_then(|v| v.huge_page_size()).is_none_or(|h| addr.is_multiple_of(h))
}
