//! Truncating a shmem file under its mappings (mm/truncate.c
//! `truncate_pagecache`, mm/memory.c `unmap_mapping_range`): every PTE that
//! maps a page past the new end is zapped, in every MM, before the page
//! cache lets the folios go; COWed private copies go too (`even_cows`), as
//! truncation asks.
//!
//! Differs from Linux: the VMAs that map the file are found by walking the
//! machine's MMs (no `i_mmap` interval tree), each under its mmap_lock for
//! read instead of `i_mmap_rwsem`.

use crate::arch::PAGE_SIZE;
use crate::memory::zap::unmap_page_range;
use crate::mm_types::MmList;
use crate::shmem::Inode;
use crate::sync::Arc;
use crate::tlb::MmuGather;
use crate::Result;

impl MmList {
    /// `ftruncate(fd, size)` on a shmem file (`shmem_setattr`): unmaps the
    /// pages past `size` everywhere, then drops them from the cache and
    /// sets the size. EINVAL past the largest file size.
    pub fn truncate(&self, inode: &Arc<Inode>, size: u64) -> Result<()> {
        let first = size.div_ceil(PAGE_SIZE);
        if first < inode.nr_pages() {
            self.unmap_mapping_pages(inode, first);
        }
        inode.truncate(size)
    }

    /// `unmap_mapping_pages(mapping, first, 0, even_cows)`: zaps, in every
    /// VMA of every MM that maps `inode`, the pages from file page `first` on.
    fn unmap_mapping_pages(&self, inode: &Arc<Inode>, first: u64) {
        for mm in self.alive() {
            let vmas = mm.mmap_read_lock();
            let k = &*mm.kernel;
            let mut tlb = MmuGather::new(k, &mm.tlb, false);
            for v in vmas.iter().filter(|v| v.file().is_some_and(|f| Arc::ptr_eq(&f, inode))) {
                let last = v.pgoff() + (v.end() - v.start()) / PAGE_SIZE;
                if last <= first {
                    continue;
                }
                let start = v.start() + first.saturating_sub(v.pgoff()) * PAGE_SIZE;
                unmap_page_range(k, &mm, &mut tlb, start, v.end());
            }
        }
    }
}
