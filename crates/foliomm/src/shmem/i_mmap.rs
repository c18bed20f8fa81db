//! The mappings of a file (`address_space.i_mmap` under `i_mmap_rwsem`,
//! mm/interval_tree.c, mm/vma.c `vma_link_file` / `unlink_file_vma` /
//! `vma_prepare`): for each VMA that maps the file, the fields an rmap walk
//! or `unmap_mapping_range` reads from it.
//!
//! A VMA is linked when it enters its MM's tree and unlinked when it
//! leaves; a change of its range updates it under the write lock. Walkers
//! hold the read lock for their whole walk, so a linked VMA keeps its
//! range and its page tables (which `free_pgtables` frees only after the
//! unlink) while they look.
//!
//! Differs from Linux: the shmem layer sits below the VMAs, so it holds a
//! record of each VMA (its identity, MM, start and file range) instead of
//! the VMA; records are kept in link order and a walk scans them all
//! (Linux's interval tree, ordered by `vm_pgoff` and then by insertion,
//! finds the overlapping ones in O(log n)). Link order keeps what Linux's
//! order is for: a VMA linked after another (mremap's destination, fork's
//! child) is walked after it.

use std::collections::HashMap;

use crate::arch::PAGE_SIZE;
use crate::sync::cacheline::{self, Structure};
use crate::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// One VMA mapping the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileMapping {
    /// The VMA's identity (its address while it is linked).
    pub vma: usize,
    /// `vm_mm`: the serial of the MM the VMA belongs to.
    pub mm: u64,
    /// `vm_start`.
    pub start: u64,
    /// `vm_pgoff`: the file page mapped at `start`.
    pub pgoff: u64,
    /// Pages the VMA spans.
    pub pages: u64,
    /// `vm_flags`.
    pub flags: u32,
    /// `vma_is_shared_maywrite`: a shared mapping that is or may become
    /// writable, which counts in `i_mmap_writable` (fixed for the VMA's life).
    pub shared_maywrite: bool,
}

impl FileMapping {
    /// The part of the file pages `first..last` this VMA maps, as the
    /// address range `[start, end)` mapping it; None if it maps none of them
    /// (`vma_interval_tree_foreach` + the address clipping of
    /// `unmap_mapping_range_tree`).
    pub fn addresses(&self, first: u64, last: u64) -> Option<(u64, u64)> {
        let (lo, hi) = (self.pgoff, self.pgoff + self.pages);
        if hi <= first || lo >= last {
            return None;
        }
        let start = self.start + first.saturating_sub(lo) * PAGE_SIZE;
        let end = self.start + (last.min(hi) - lo) * PAGE_SIZE;
        Some((start, end))
    }
}

/// The hugetlb VMA lock (`struct hugetlb_vma_lock`'s `rw_sema`) of a
/// shared hugetlb VMA.
pub type HugetlbVmaLock = Arc<RwLock<()>>;

/// `i_mmap` and `i_mmap_rwsem`, with the hugetlb VMA locks of the linked
/// shared hugetlb VMAs (`vm_private_data` in Linux, kept here beside the
/// records for want of the VMA).
#[derive(Debug, Default)]
pub struct IMmap(RwLock<Vec<FileMapping>>, Mutex<HashMap<usize, HugetlbVmaLock>>);

impl IMmap {
    /// `vma_link_file`: adds a VMA, after every VMA linked before it; with
    /// `vma_lock`, a new hugetlb VMA lock for it (`hugetlb_vma_lock_alloc`).
    pub fn link(&self, m: FileMapping, vma_lock: bool) {
        if vma_lock {
            self.1.lock().unwrap().insert(m.vma, Arc::new(RwLock::new(())));
        }
        self.0.write().unwrap().push(m);
    }

    /// `unlink_file_vma`: removes the VMA `vma` and its VMA lock (which a
    /// holder keeps alive); waits for every walker.
    pub fn unlink(&self, vma: usize) {
        self.0.write().unwrap().retain(|m| m.vma != vma);
        self.1.lock().unwrap().remove(&vma);
    }

    /// The hugetlb VMA lock of the linked VMA `vma`, if it has one.
    pub fn vma_lock(&self, vma: usize) -> Option<HugetlbVmaLock> {
        self.1.lock().unwrap().get(&vma).cloned()
    }

    /// `vma_prepare` .. `vma_complete` around `vma_set_range`: the linked
    /// VMA `vma` now maps `pages` pages from `pgoff` at `start`. Does
    /// nothing for a VMA not linked (yet).
    pub fn update(&self, vma: usize, start: u64, pgoff: u64, pages: u64) {
        let mut tree = self.0.write().unwrap();
        if let Some(m) = tree.iter_mut().find(|m| m.vma == vma) {
            (m.start, m.pgoff, m.pages) = (start, pgoff, pages);
        }
    }

    /// `i_mmap_lock_read`: the linked VMAs in walk order, fixed until the
    /// guard is dropped.
    pub fn read(&self) -> RwLockReadGuard<'_, Vec<FileMapping>> {
        cacheline::write(Structure::IMmapRwsem, &self.0);
        self.0.read().unwrap()
    }

    /// `i_mmap_lock_write`: the records, with no walker and no change
    /// until the guard is dropped.
    pub fn write(&self) -> RwLockWriteGuard<'_, Vec<FileMapping>> {
        cacheline::write(Structure::IMmapRwsem, &self.0);
        self.0.write().unwrap()
    }

    /// The linked VMA `vma` has new flags (`vm_flags_reset`).
    pub fn update_flags(&self, vma: usize, flags: u32) {
        if let Some(m) = self.0.write().unwrap().iter_mut().find(|m| m.vma == vma) {
            m.flags = flags;
        }
    }

    /// A copy of the records (for the checker).
    pub fn snapshot(&self) -> Vec<FileMapping> {
        self.read().clone()
    }
}
