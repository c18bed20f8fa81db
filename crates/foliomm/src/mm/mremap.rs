//! mm/mremap.c `mremap`: shrink, grow in place, or move a mapping, its
//! page tables moved by [`crate::memory::move_page_tables`].

use super::mmap::{get_unmapped_area, MMAP_MIN_ADDR};
use super::vma::merge_around;
use super::{page_align, range_end};
use crate::arch::{PAGE_SIZE, PMD_SIZE, TASK_SIZE};
use crate::memory::move_page_tables::{move_hugetlb_page_tables, move_page_tables};
use crate::memory::zap::free_pgtables;
use crate::mm_types::{vm, Mm, Vmas};
use crate::tlb::MmuGather;
use crate::{Errno, Result};

impl Mm {
    /// `mremap(old, old_len, new_len, flags, new_addr)`: shrink in place,
    /// grow in place when the space after the VMA is free, else move
    /// (`MREMAP_MAYMOVE`), or move to `fixed` (`MREMAP_FIXED`). A hugetlb
    /// mapping moves and shrinks in whole huge pages and never grows. Page tables move without touching rmap
    /// (`move_page_tables`); a huge PMD moves whole when both addresses are
    /// PMD-aligned, else it is split first.
    pub fn mremap(&self, old: u64, old_len: u64, new_len: u64, maymove: bool, fixed: Option<u64>) -> Result<u64> {
        if !old.is_multiple_of(PAGE_SIZE) || new_len == 0 || old_len == 0 || (fixed.is_some() && !maymove) {
            return Err(Errno::EINVAL);
        }
        let old_len = page_align(old_len)?;
        let new_len = page_align(new_len)?;
        let old_end = range_end(old, old_len)?;
        // check_mremap_params(): the target is validated before any VMA lookup.
        if let Some(new) = fixed {
            let new_end = range_end(new, new_len)?;
            if new < MMAP_MIN_ADDR || (new < old_end && old < new_end) {
                return Err(Errno::EINVAL);
            }
        }
        let mut vmas = self.mmap_write_lock();
        let vma = vmas.find(old).cloned().ok_or(Errno::EFAULT)?;
        // align_hugetlb(): whole huge pages at huge-page-aligned addresses,
        // never growing (the reservation map cannot follow).
        let (old_len, new_len) = match vma.huge_page_size() {
            Some(h) => {
                let (o, n) = (old_len.next_multiple_of(h), new_len.next_multiple_of(h));
                if !old.is_multiple_of(h) || fixed.is_some_and(|f| !f.is_multiple_of(h)) || n > o {
                    return Err(Errno::EINVAL);
                }
                (o, n)
            }
            None => (old_len, new_len),
        };
        let old_end = range_end(old, old_len)?;
        let vma_end = vma.end();
        if old_end > vma_end {
            return Err(Errno::EFAULT);
        }
        let max = self.kernel.config.max_map_count;
        if let Some(new) = fixed {
            // check_mremap_params(): room for both ends to split in three.
            if vmas.len() + 2 >= max.saturating_sub(3) {
                return Err(Errno::ENOMEM);
            }
            let new_end = new + new_len;
            self.do_munmap(&mut vmas, new, new_end)?;
            let moved_len = old_len.min(new_len);
            self.do_munmap(&mut vmas, old + moved_len, old_end)?;
            self.move_vma(&mut vmas, old, moved_len, new, new_len, false)?;
            return Ok(new);
        }
        if new_len <= old_len {
            // The same length changes nothing (no split at the end).
            if new_len < old_len {
                self.do_munmap(&mut vmas, old + new_len, old_end)?;
            }
            return Ok(old);
        }
        let grow_end = old.checked_add(new_len).filter(|&e| e <= TASK_SIZE);
        if let Some(grow_end) = grow_end.filter(|&e| vma_end == old_end && !vmas.any_in(old_end, e)) {
            vmas.start_write(&vma);
            vma.set_range(vma.start(), grow_end, vma.pgoff());
            merge_around(&mut vmas, old, grow_end, self.kernel.config.release(), &[vma.start()]);
            return Ok(old);
        }
        if !maymove {
            return Err(Errno::ENOMEM);
        }
        let thp_align = self.kernel.config.release().aligns_anon_mapping(new_len, PMD_SIZE);
        let align = if thp_align { PMD_SIZE } else { PAGE_SIZE };
        let new = get_unmapped_area(&vmas, self.mmap_base(), new_len, align, 0)?;
        self.move_vma(&mut vmas, old, old_len, new, new_len, false)?;
        Ok(new)
    }

    /// `mremap(old, len, new_len, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, fixed)`:
    /// the pages of `[old, old+len)` move to a new VMA (at `fixed`, or where
    /// there is room), the same frames; the source VMA stays, empty, no
    /// longer mlocked, so its next faults find zero pages (anonymous
    /// memory) or the file's. EINVAL unless `new_len == len`, on a
    /// hugetlb VMA (`VM_DONTEXPAND`), or with `fixed` overlapping the
    /// source; EFAULT where no single VMA holds the range.
    pub fn mremap_dontunmap(&self, old: u64, len: u64, new_len: u64, fixed: Option<u64>) -> Result<u64> {
        if !old.is_multiple_of(PAGE_SIZE) || len == 0 || new_len != len {
            return Err(Errno::EINVAL);
        }
        let len = page_align(len)?;
        let old_end = range_end(old, len)?;
        if let Some(new) = fixed {
            let new_end = range_end(new, len)?;
            if !new.is_multiple_of(PAGE_SIZE) || new < MMAP_MIN_ADDR || (new < old_end && old < new_end) {
                return Err(Errno::EINVAL);
            }
        }
        let mut vmas = self.mmap_write_lock();
        let vma = vmas.find(old).cloned().ok_or(Errno::EFAULT)?;
        if vma.is_hugetlb() {
            return Err(Errno::EINVAL);
        }
        if old_end > vma.end() {
            return Err(Errno::EFAULT);
        }
        let new = match fixed {
            Some(new) => {
                self.do_munmap(&mut vmas, new, new + len)?;
                new
            }
            None => get_unmapped_area(&vmas, self.mmap_base(), len, PAGE_SIZE, 0)?,
        };
        self.move_vma(&mut vmas, old, len, new, len, true)?;
        Ok(new)
    }

    /// `move_vma`: a new VMA at `new` with the old one's flags, pgoff and
    /// anon_vma; page tables moved; the old range unmapped. ENOMEM, with
    /// nothing changed, within 3 VMAs of `vm.max_map_count`
    /// (`prep_move_vma`: the unmap may split one VMA in three).
    fn move_vma(&self, vmas: &mut Vmas, old: u64, old_len: u64, new: u64, new_len: u64, dontunmap: bool) -> Result<()> {
        if vmas.len() >= self.kernel.config.max_map_count.saturating_sub(3) {
            return Err(Errno::ENOMEM);
        }
        // prep_move_vma(): KSM pages are broken before they move (the
        // VMA stays mergeable).
        self.unmerge_ksm_pages(vmas, old, old + old_len)?;
        self.split_vma_unchecked(vmas, old);
        self.split_vma_unchecked(vmas, old + old_len);
        let src = vmas.get(old).cloned().expect("mremap source VMA");
        let moved = vmas.dup(&src);
        moved.set_range(new, new + new_len, src.pgoff());
        // mremap_userfaultfd_prep() without UFFD_FEATURE_EVENT_REMAP: the
        // moved VMA leaves its userfaultfd behind.
        let clear_uffd_wp = src.userfaultfd_armed() && self.kernel.config.release().mremap_clears_uffd_wp();
        moved.set_userfaultfd_ctx(None);
        moved.set_flags(moved.flags() & !vm::UFFD_FLAGS);
        // The destination is linked to the file after the source, and the
        // source unlinked after the move, so an `i_mmap` walker (which
        // takes them in that order) finds each page at one end or the
        // other (Linux: `need_rmap_locks` false).
        vmas.insert(moved.clone());
        if src.is_hugetlb() {
            // The source's reservations go with the destination
            // (clear_vma_resv_huge_pages on the source).
            src.set_hugetlb_resv(None);
            move_hugetlb_page_tables(&self.kernel, self, &moved, old, new, old_len)?;
        } else if let Err(e) = move_page_tables(&self.kernel, self, old, new, old_len, clear_uffd_wp) {
            // Out of page tables midway: the entries moved go back, into
            // tables the source still has, and the destination goes
            // (move_vma's error path); the source VMA stays. Moving back
            // runs against the i_mmap walk order (source first), so it
            // holds i_mmap_rwsem for write (take_rmap_locks).
            let file = src.file();
            let i_mmap = file.as_ref().map(|f| f.i_mmap.write());
            move_page_tables(&self.kernel, self, new, old, old_len, false).expect("the source's tables still exist");
            drop(i_mmap);
            let moved = vmas.remove(new).expect("mremap destination VMA");
            vmas.free(moved);
            let mut tlb = MmuGather::new(&self.kernel, &self.tlb, false);
            free_pgtables(&self.kernel, self, vmas, &mut tlb, new, new + new_len);
            return Err(e);
        }
        if dontunmap {
            // The source stays, emptied, unlocked, without its anon_vma
            // (unlink_anon_vmas): its next faults start afresh.
            vmas.start_write(&src);
            src.set_flags(src.flags() & !vm::LOCKED);
            src.anon_vma.reset();
        } else {
            let src = vmas.remove(src.start()).expect("mremap source VMA");
            vmas.free(src);
            let mut tlb = MmuGather::new(&self.kernel, &self.tlb, false);
            free_pgtables(&self.kernel, self, vmas, &mut tlb, old, old + old_len);
        }
        merge_around(vmas, new, new + new_len, self.kernel.config.release(), &[new]);
        Ok(())
    }
}
