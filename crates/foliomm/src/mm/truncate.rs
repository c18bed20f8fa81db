//! Truncating a shmem file, or punching a hole in it, under its mappings
//! (mm/truncate.c `truncate_pagecache`, mm/shmem.c `shmem_setattr` and
//! `shmem_fallocate(FALLOC_FL_PUNCH_HOLE)`, mm/madvise.c `madvise_remove`,
//! mm/memory.c `unmap_mapping_range`): every PTE that maps a page being
//! dropped is zapped, in every MM, before the page cache lets it go.
//! Truncation takes the private copies of those pages too (`even_cows`); a
//! hole punch leaves them.
//!
//! Differs from Linux: the VMAs that map the file are found by walking the
//! machine's MMs (no `i_mmap` interval tree), each under its mmap_lock for
//! read instead of `i_mmap_rwsem`.

use crate::arch::PAGE_SIZE;
use crate::memory::zap::unmap_page_range;
use crate::mm_types::{vm, Mm, MmList};
use crate::shmem::Inode;
use crate::sync::Arc;
use crate::tlb::MmuGather;
use crate::{Errno, Result};

impl MmList {
    /// `ftruncate(fd, size)` on a shmem file (`shmem_setattr`): unmaps the
    /// pages past `size` everywhere, then drops them from the cache and
    /// sets the size. EINVAL past the largest file size.
    pub fn truncate(&self, inode: &Arc<Inode>, size: u64) -> Result<()> {
        let first = size.div_ceil(PAGE_SIZE);
        if first < inode.nr_pages() {
            self.unmap_mapping_pages(inode, first, u64::MAX, true);
        }
        inode.truncate(size)
    }

    /// `fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset,
    /// len)`: the whole pages of the range are unmapped from every shared
    /// and private mapping (private copies stay) and dropped from the cache;
    /// the bytes of partly covered pages read zero. The size stays.
    pub fn punch_hole(&self, inode: &Arc<Inode>, offset: u64, len: u64) -> Result<()> {
        let end = offset.checked_add(len).ok_or(Errno::EINVAL)?;
        let (first, last) = (offset.div_ceil(PAGE_SIZE), end / PAGE_SIZE);
        if first < last {
            self.unmap_mapping_pages(inode, first, last, false);
        }
        inode.punch_hole(offset, end);
        Ok(())
    }

    /// `unmap_mapping_pages(mapping, first, last - first, even_cows)`: zaps,
    /// in every VMA of every MM that maps `inode`, the pages of file pages
    /// `first..last`; private copies too if `even_cows`.
    fn unmap_mapping_pages(&self, inode: &Arc<Inode>, first: u64, last: u64, even_cows: bool) {
        for mm in self.alive() {
            let vmas = mm.mmap_read_lock();
            let k = &*mm.kernel;
            let mut tlb = MmuGather::new(k, &mm.tlb, false);
            for v in vmas.iter().filter(|v| v.file().is_some_and(|f| Arc::ptr_eq(&f, inode))) {
                let (lo, hi) = (v.pgoff(), v.pgoff() + (v.end() - v.start()) / PAGE_SIZE);
                if hi <= first || lo >= last {
                    continue;
                }
                let start = v.start() + first.saturating_sub(lo) * PAGE_SIZE;
                let end = v.start() + (last.min(hi) - lo) * PAGE_SIZE;
                unmap_page_range(k, &mm, &mut tlb, start, end, !even_cows);
            }
        }
    }
}

impl Mm {
    /// `madvise(MADV_REMOVE)` over `[addr, addr + len)` of one shared,
    /// writable file VMA: punches the hole in the file it maps there.
    /// EINVAL without a file, EACCES unless shared and writable.
    pub fn madvise_remove(&self, addr: u64, len: u64) -> Result<()> {
        let (inode, offset) = {
            let vmas = self.mmap_read_lock();
            let v = vmas.find(addr).ok_or(Errno::ENOMEM)?;
            let inode = v.file().ok_or(Errno::EINVAL)?;
            if v.flags() & (vm::SHARED | vm::WRITE) != vm::SHARED | vm::WRITE {
                return Err(Errno::EACCES);
            }
            if addr.checked_add(len).is_none_or(|e| e > v.end()) {
                return Err(Errno::EINVAL);
            }
            (inode, v.page_index(addr) * PAGE_SIZE + addr % PAGE_SIZE)
        };
        // madvise_remove() drops the mmap_lock before fallocate.
        self.mmlist.punch_hole(&inode, offset, len)
    }
}
