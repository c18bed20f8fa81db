//! Truncating a shmem file, or punching a hole in it, under its mappings
//! (mm/truncate.c `truncate_pagecache`, mm/shmem.c `shmem_setattr` and
//! `shmem_fallocate(FALLOC_FL_PUNCH_HOLE)`, mm/madvise.c `madvise_remove`,
//! mm/memory.c `unmap_mapping_range`): every PTE that maps a page being
//! dropped is zapped, in every MM, before the page cache lets it go.
//! Truncation takes the private copies of those pages too (`even_cows`); a
//! hole punch leaves them.
//!
//! Every fault maps a file page, or a private copy of one, only while the
//! folio is still in the cache (checked under the PTL), and truncation and
//! hole punch unmap again once the folios left the cache, so no PTE
//! outlives its page's place in the cache.
//!
//! A hugetlbfs file's pages leave the cache one at a time under their fault
//! mutexes, as Linux's `remove_inode_hugepages` has them.
//!
//! Differs from Linux: no folio lock; the fault's check under the PTL and
//! the second unmap stand in for it (Linux's hole punch unmaps a folio
//! still mapped when it drops it, `truncate_cleanup_folio`; here the
//! whole range of a shmem file is unmapped again).

use crate::arch::PAGE_SIZE;
use crate::mm_types::{vm, Mm, MmList};
use crate::shmem::Inode;
use crate::sync::Arc;
use crate::{Errno, Result};

impl MmList {
    /// `ftruncate(fd, size)` on a shmem file (`shmem_setattr` →
    /// `truncate_pagecache`): sets the size, unmaps the pages past it
    /// everywhere, private copies too, drops them from the cache (a large
    /// folio across the new end split if it can be), and unmaps again what
    /// faults mapped meanwhile. EINVAL past the largest
    /// file size; EPERM where a seal forbids the change.
    pub fn truncate(&self, inode: &Arc<Inode>, size: u64) -> Result<()> {
        if inode.is_hugetlbfs() && !size.is_multiple_of(inode.page_unit()) {
            return Err(Errno::EINVAL);
        }
        let _inode_lock = inode.i_rwsem.lock().unwrap();
        inode.resize_seals(size)?;
        let shrinks = size < inode.size();
        inode.set_size(size)?;
        if shrinks && inode.is_hugetlbfs() {
            self.unmap_mapping_pages(inode, size / PAGE_SIZE, u64::MAX, true);
            self.remove_inode_hugepages(inode, size, u64::MAX);
        } else if shrinks {
            let first = size.div_ceil(PAGE_SIZE);
            self.unmap_mapping_pages(inode, first, u64::MAX, true);
            self.unmap_to_split(inode, size, u64::MAX);
            inode.undo_range(size, u64::MAX);
            self.unmap_mapping_pages(inode, first, u64::MAX, true);
        }
        Ok(())
    }

    /// `fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset,
    /// len)`: the whole pages of the range are unmapped from every shared
    /// and private mapping (private copies stay) and dropped from the cache,
    /// large folios split where the range ends inside them
    /// (`Inode::undo_range`); the bytes of partly covered pages read zero.
    /// The size stays. EINVAL for an empty range, EFBIG past the largest
    /// file size (`vfs_fallocate`), EPERM on a write-sealed file.
    pub fn punch_hole(&self, inode: &Arc<Inode>, offset: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let end = offset.checked_add(len).filter(|&e| e <= crate::shmem::MAX_FILE_SIZE).ok_or(Errno::EFBIG)?;
        // Whole pages are unmapped: huge pages for hugetlbfs, which never
        // splits one (hugetlbfs_punch_hole).
        let unit = inode.page_unit();
        let (first, last) = (offset.div_ceil(unit) * unit / PAGE_SIZE, end / unit * unit / PAGE_SIZE);
        let whole_pages = first < last;
        let _inode_lock = inode.i_rwsem.lock().unwrap();
        inode.fallocate_seals(true, end)?;
        if whole_pages {
            self.unmap_mapping_pages(inode, first, last, false);
        }
        if inode.is_hugetlbfs() {
            self.remove_inode_hugepages(inode, offset, end);
            return Ok(());
        }
        self.unmap_to_split(inode, offset, end);
        inode.undo_range(offset, end);
        if whole_pages {
            self.unmap_mapping_pages(inode, first, last, false);
        }
        Ok(())
    }

    /// `remove_inode_hugepages` (after `hugetlb_vmdelete_list` unmapped the
    /// range): one scan of the cache from `offset`, a folio batch at a
    /// time (`filemap_get_folios`); each huge page wholly inside `[offset,
    /// end)` leaves the cache under its fault mutex, so that no fault maps
    /// it meanwhile; one still mapped (a fault mapped it since, or the
    /// unmap skipped a busy VMA) is unmapped first, under the mutex
    /// ([`MmList::unmap_mapped_huge_page`]). Then, on truncation, every
    /// reservation past the end goes back (`hugetlb_unreserve_pages`); for
    /// a hole, the partly covered pages at its edges are zeroed.
    ///
    /// A page a fault adds behind the scan stays cached and mapped, as in
    /// Linux: on truncation that is a fault that read the old size and was
    /// still zeroing its page when the scan passed (6.1+: the unmap skipped
    /// its VMA, whose lock the fault holds). The page stays past the end,
    /// mapped, and comes back with its bytes if the file grows again; its
    /// reservation was given back although used, so the count is one short
    /// until the file goes, or for good (see [`Inode::hugetlb_get_folio`]).
    /// The host kernel does the same (foliomm-host's hugetlb_truncate_race
    /// test).
    fn remove_inode_hugepages(&self, inode: &Inode, offset: u64, end: u64) {
        let unit = inode.page_unit();
        let (nr, batch) = (unit / PAGE_SIZE, inode.k.config.release().folio_batch_size());
        let (truncating, mut next, mut freed) = (end == u64::MAX, offset, 0);
        loop {
            let listed: Vec<u64> = inode.huge_pages_in(next, end).into_iter().take(batch).collect();
            let Some(&last) = listed.last() else { break };
            for first in listed {
                let mutex = inode.k.hugetlb_fault_mutex(inode.ino, first);
                let mut _mutex = mutex.lock().unwrap();
                if inode.huge_page_mapped(first) {
                    _mutex = self.unmap_mapped_huge_page(inode, first, mutex, _mutex);
                }
                if inode.remove_huge_page(first) {
                    freed += 1;
                    if !truncating {
                        inode.hugetlb_unreserve_freed(&[first]);
                    }
                }
            }
            next = (last + nr) * PAGE_SIZE;
        }
        if truncating {
            // Every entry past the end goes, and the promises of those the
            // freed pages did not use go back (`chg - freed`).
            return inode.hugetlb_unreserve(offset / PAGE_SIZE, u64::MAX, freed);
        }
        let (lo, hi) = (offset.next_multiple_of(unit).min(end), (end / unit * unit).max(offset));
        if lo > offset {
            inode.undo_range(offset, lo);
        }
        if end > hi.max(lo) {
            inode.undo_range(hi.max(lo), end);
        }
    }

    /// Unmaps the large folios `[offset, end)` covers in part and could
    /// split (`unmap_folio`, which Linux's split does itself).
    fn unmap_to_split(&self, inode: &Inode, offset: u64, end: u64) {
        for (first, nr) in inode.splittable_partial_folios(offset, end) {
            self.unmap_mapping_pages(inode, first, first + nr, false);
        }
    }

    /// `unmap_mapping_pages(mapping, first, last - first, even_cows)`: under
    /// `i_mmap_rwsem` for read, zaps in every VMA linked to `inode` the
    /// pages that map file pages `first..last`, private copies too if
    /// `even_cows` (`unmap_mapping_range_tree` → `zap_page_range_single`);
    /// on hugetlbfs, `hugetlb_vmdelete_list` under `i_mmap_rwsem` for write
    /// instead. No mmap_lock is taken: the VMAs found keep their ranges and
    /// page tables until the walk ends.
    fn unmap_mapping_pages(&self, inode: &Inode, first: u64, last: u64, even_cows: bool) {
        // MMs are let go after the walk: dropping the last reference to one
        // exits it, which unlinks its VMAs.
        let mut mms = Vec::new();
        if inode.is_hugetlbfs() {
            return self.hugetlb_vmdelete_list(inode, first, last, &mut mms);
        }
        for m in inode.i_mmap.read().iter() {
            self.zap_mapping(m, first, last, even_cows, &mut mms);
        }
    }
}

impl Mm {
    /// `madvise(MADV_REMOVE)` over `[addr, addr + len)`: in each VMA of
    /// the range in turn (`madvise_walk_vmas`), punches the hole in the
    /// file the VMA maps there. Stops at the first VMA that refuses:
    /// EINVAL if mlocked or without a file, EACCES unless shared and
    /// writable (or able to become writable, `VM_MAYWRITE`, in the
    /// releases `remove_takes_a_maywrite_mapping` names); the parts
    /// before it stay punched. ENOMEM at the end if
    /// part of the range was not mapped.
    pub fn madvise_remove(&self, addr: u64, len: u64) -> Result<()> {
        let end = addr.checked_add(len).ok_or(Errno::EINVAL)?;
        let (mut start, mut unmapped) = (addr, false);
        while start < end {
            let (inode, offset, part_end) = {
                let vmas = self.mmap_read_lock();
                let Some(v) = vmas.overlapping(start, end).next() else {
                    unmapped = true;
                    break;
                };
                unmapped |= v.start() > start;
                start = start.max(v.start());
                if v.flags() & vm::LOCKED != 0 {
                    return Err(Errno::EINVAL);
                }
                let inode = v.file().ok_or(Errno::EINVAL)?;
                let writable = match self.kernel.config.release().remove_takes_a_maywrite_mapping() {
                    true => v.flags() & vm::NO_MAYWRITE == 0,
                    false => v.flags() & vm::WRITE != 0,
                };
                if v.flags() & vm::SHARED == 0 || !writable {
                    return Err(Errno::EACCES);
                }
                (inode, v.page_index(start) * PAGE_SIZE, end.min(v.end()))
            };
            // madvise_remove() drops the mmap_lock before fallocate, and
            // the walk looks the next VMA up afresh.
            self.mmlist.punch_hole(&inode, offset, part_end - start)?;
            start = part_end;
        }
        if unmapped {
            return Err(Errno::ENOMEM);
        }
        Ok(())
    }
}
